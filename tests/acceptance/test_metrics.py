"""Acceptance: the workers' /metrics against the database's own counts.

After a burst, the counters summed over the workers equal what the turns
table says happened; the elected sampler (exactly one worker) reports the
queue the database has; when it drains, another worker takes over. Every log
line of these workers is JSON (STINT_LOG_FORMAT=json) with the turn's fields.
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.scrape import Samples, by_label, free_port, scrape, total, value
from tests.workers import Cluster, WorkerProc, fetch

pytestmark = pytest.mark.acceptance

_TERMINAL = ("succeeded", "failed", "cancelled", "interrupted")


async def _pages(ports: list[int]) -> list[Samples]:
    pages = [await scrape(f"http://127.0.0.1:{port}/metrics") for port in ports]
    assert all(p is not None for p in pages), "a worker did not answer /metrics"
    return [p for p in pages if p is not None]


async def _all_finished(pool: Pool, count: int) -> bool:
    rows = await fetch(pool, "SELECT count(*) FROM turns WHERE status = ANY(%s)", list(_TERMINAL))
    return int(rows[0][0]) == count


async def test_metrics_after_a_burst_match_the_database(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    ports = [free_port(), free_port()]
    workers = [
        cluster.start_worker(slots=2, health_port=port, log_format="json", sample_seconds=0.2)
        for port in ports
    ]
    await wait_until(lambda: _answering(ports), what="both workers serve /metrics")
    client = ClientStore(db.config, pool)
    sessions = 8
    for n in range(sessions * 3):
        # One turn in eight fails (the scripted harness cannot read its wait).
        turn_input: dict[str, Any] = {"min_wait_ms": 10 if n % 8 else "not a number"}
        await client.turns_enqueue(
            session_id=None,
            idempotency_key=f"k{n}",
            turn_input=turn_input,
            session_key=f"s{n % sessions}",
        )
    burst = sessions * 3
    await wait_until(lambda: _all_finished(pool, burst), what="the burst finished", within=60)

    by_status = {
        str(r[0]): int(r[1])
        for r in await fetch(pool, "SELECT status, count(*) FROM turns GROUP BY status")
    }
    attempts = int((await fetch(pool, "SELECT sum(attempts) FROM turns"))[0][0])
    assert set(by_status) == {"succeeded", "failed"} and by_status["failed"] == 3

    async def counted() -> list[Samples] | None:
        pages = await _pages(ports)
        done = by_label(pages, "stint_turns_finished_total", "status")
        return pages if done == by_status else None

    pages = await wait_until(counted, what="the counters reached the database's counts")
    assert by_label(pages, "stint_turns_finished_total", "status") == by_status
    assert total(pages, "stint_turns_started_total") == attempts
    for status, count in by_status.items():
        assert total(pages, "stint_turn_duration_seconds_count", status=status) == count
    assert total(pages, "stint_turn_queue_wait_seconds_count") == burst  # every first start
    claimed = total(pages, "stint_claimed_sessions_total")
    assert 1 <= claimed <= attempts
    assert total(pages, "stint_claims_total") >= 1
    assert total(pages, "stint_claim_duration_seconds_count") == total(pages, "stint_claims_total")
    assert total(pages, "stint_batch_statements_total") >= total(pages, "stint_batches_total") > 0
    unknown = int((await fetch(pool, "SELECT count(*) FROM steps WHERE status = 'unknown'"))[0][0])
    assert total(pages, "stint_unknown_effects_total") == unknown == 0
    assert total(pages, "stint_leases_lost_total") == 0
    assert total(pages, "stint_worker_slots") == 4
    for page in pages:  # each worker's statements borrowed from its own small pool
        assert 1 <= (value(page, "stint_pool_connections") or 0) <= 2  # STINT_POOL_SIZE
        borrows = value(page, "stint_pool_requests_total") or 0
        assert 0 <= (value(page, "stint_pool_requests_queued_total") or 0) <= borrows
        assert borrows > 0 and value(page, "stint_pool_wait_seconds_total") is not None
    assert total(pages, "stint_sampler_leader") == 1  # one elected sampler, whichever it is

    # The sampler's last reading: nothing queued, nothing held, what finished counted.
    async def settled() -> Samples | None:
        for page in await _pages(ports):
            if (
                value(page, "stint_sampler_leader") == 1
                and value(page, "stint_fleet_slots_busy") == 0
            ):
                return page
        return None

    leader = await wait_until(settled, what="the sampler saw the queue empty")
    assert value(leader, "stint_queue_ready_sessions") == 0
    assert value(leader, "stint_queue_queued_turns") == 0
    assert value(leader, "stint_fleet_slots") == 4
    assert value(leader, "stint_fleet_live_workers") == 2
    sampled = await fetch(pool, "SELECT sum(turns_finished) FROM stats_samples")
    assert int(sampled[0][0]) <= burst  # the ring keeps what finished per interval

    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [await asyncio.to_thread(w.wait) for w in workers] == [0, 0]
    _every_line_is_json(workers, finished=burst)


async def _answering(ports: list[int]) -> bool:
    return all([await scrape(f"http://127.0.0.1:{port}/metrics") is not None for port in ports])


def _every_line_is_json(workers: list[WorkerProc], *, finished: int) -> None:
    lines = [json.loads(line) for w in workers for line in w.log_text().splitlines() if line]
    turn_lines = [line for line in lines if line.get("duration_s") is not None]
    assert len(turn_lines) == finished  # one INFO line per finished turn
    for line in turn_lines:
        assert line["level"] == "INFO" and line["logger"] == "stint.worker.runner"
        assert {"worker", "session", "turn", "epoch", "status", "attempt"} <= set(line)
        assert line["message"].startswith(f"turn {line['turn']} {line['status']} in ")
    assert all("worker" in line for line in lines if line["logger"].startswith("stint.worker"))


async def test_the_elected_sampler_reports_the_queue_the_database_has(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    first_port, second_port = free_port(), free_port()
    first = cluster.start_worker(
        slots=1, health_port=first_port, sample_seconds=0.2, drain_seconds=0, pins="p"
    )
    await wait_until(lambda: _answering([first_port]), what="the first worker serves /metrics")
    client = ClientStore(db.config, pool)
    for n in range(4):  # one runs (held at its gate), three wait for the one slot
        await client.turns_enqueue(
            session_id=None,
            idempotency_key=f"g{n}",
            turn_input={"gate": "g"},
            pin="p",
        )

    async def reading(port: int) -> Samples | None:
        page = await scrape(f"http://127.0.0.1:{port}/metrics")
        if page is None or value(page, "stint_sampler_leader") != 1:
            return None
        ready = await fetch(pool, "SELECT count(*) FROM sessions WHERE status = 'ready'")
        if value(page, "stint_queue_ready_sessions") != int(ready[0][0]):
            return None
        return page if value(page, "stint_queue_running_turns") == 1 else None

    page = await wait_until(lambda: reading(first_port), what="the sampler saw 3 ready, 1 running")
    assert value(page, "stint_queue_ready_sessions") == 3
    assert value(page, "stint_queue_queued_turns") == 3
    assert (value(page, "stint_fleet_slots"), value(page, "stint_fleet_slots_busy")) == (1, 1)
    assert (value(page, "stint_queue_oldest_ready_seconds") or 0) > 0

    # A second candidate (without pin p it runs none of these sessions, so it only
    # samples) stays quiet while the first leads, and takes over when it drains.
    second = cluster.start_worker(slots=1, health_port=second_port, sample_seconds=0.2)
    quiet = await wait_until(
        lambda: scrape(f"http://127.0.0.1:{second_port}/metrics"), what="the second serves"
    )
    assert value(quiet, "stint_sampler_leader") == 0
    assert value(quiet, "stint_queue_ready_sessions") is None  # no duplicate series
    first.signal(signal.SIGTERM)  # drain 0: hands its turn back, resigns
    assert await asyncio.to_thread(first.wait) == 0

    async def took_over() -> Samples | None:
        page = await scrape(f"http://127.0.0.1:{second_port}/metrics")
        if page is None or value(page, "stint_sampler_leader") != 1:
            return None
        return page if value(page, "stint_queue_ready_sessions") == 4 else None

    page = await wait_until(took_over, what="the second worker samples: 4 ready, none running")
    assert value(page, "stint_fleet_slots") == 1  # only the second is live now
    holders = await fetch(pool, "SELECT DISTINCT sampled_by FROM stats_samples")
    assert len(holders) == 2
    second.signal(signal.SIGTERM)
    assert await asyncio.to_thread(second.wait) == 0
