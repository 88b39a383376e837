"""Acceptance: real worker processes, stopped by signals, judged by the checkers."""

from __future__ import annotations

import signal
from collections import Counter
from functools import partial
from uuid import UUID

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, event_kinds, fetch, turn_states


async def _enqueue(
    client: ClientStore, count: int, turn_input: dict[str, object], *, turns: int = 1
) -> list[UUID]:
    sessions = []
    for i in range(count):
        first = await client.turns_enqueue(
            session_id=None, idempotency_key=f"s{i}-0", turn_input=turn_input
        )
        for t in range(1, turns):
            await client.turns_enqueue(
                session_id=first.session_id,
                idempotency_key=f"s{i}-{t}",
                turn_input=turn_input,
            )
        sessions.append(first.session_id)
    return sessions


async def _all_finished(pool: Pool, expected: int) -> bool:
    rows = await fetch(pool, "SELECT count(*) FROM turns WHERE finished_at IS NOT NULL")
    finished: int = rows[0][0]
    return finished == expected


async def _has_event(pool: Pool, session_id: UUID, kind: str, count: int = 1) -> bool:
    return (await event_kinds(pool, session_id)).count(kind) >= count


async def _assert_checks_pass(pool: Pool, cluster: Cluster) -> None:
    report = await run_checks(pool, journals=cluster.workspace / "journals")
    assert report.passed, report.as_json()


async def test_many_workers_share_sessions_without_exceeding_slots(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    workers = [cluster.start_worker(slots=2) for _ in range(3)]
    sessions = await _enqueue(client, 18, {"min_wait_ms": 60}, turns=2)
    peak: Counter[str] = Counter()
    peak_total = 0

    async def sampled_until_done() -> bool:
        nonlocal peak_total
        rows = await fetch(
            pool,
            "SELECT lease_owner, count(*) FROM sessions WHERE status = 'running' "
            "GROUP BY lease_owner",
        )
        for owner, n in rows:
            peak[owner] = max(peak[owner], n)
        peak_total = max(peak_total, sum(n for _, n in rows))
        return await _all_finished(pool, 36)

    await wait_until(sampled_until_done, what="all 36 turns finished", within=120)
    assert max(peak.values()) <= 2
    assert peak_total <= 6
    assert await turn_states(pool) == [("succeeded", 1)] * 36
    for sid in sessions:
        assert len(cluster.journal_keys(sid)) == 2
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    await _assert_checks_pass(pool, cluster)
    owners = await fetch(pool, "SELECT count(DISTINCT worker_id) FROM turns")
    assert owners[0][0] >= 2  # the work really was shared


async def test_sigstopped_worker_is_taken_over_and_writes_nothing_after_sigcont(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    zombie = cluster.start_worker(slots=1)
    [sid] = await _enqueue(client, 1, {"min_wait_ms": 0, "gate": "g"})
    await wait_until(lambda: _has_event(pool, sid, "tool.returned"), what="effect committed")
    zombie.signal(signal.SIGSTOP)
    successor = cluster.start_worker(slots=1)
    await wait_until(lambda: _has_event(pool, sid, "turn.started", 2), what="takeover")
    cluster.open_gate("g")
    await wait_until(lambda: _all_finished(pool, 1), what="turn finished by the successor")
    settled = await event_kinds(pool, sid)
    zombie.signal(signal.SIGCONT)

    async def zombie_gave_up() -> bool:
        return "lease lost" in zombie.log_text()

    await wait_until(zombie_gave_up, what="the zombie notices it lost the lease")
    zombie.signal(signal.SIGTERM)
    assert zombie.wait() == 0
    assert (
        await event_kinds(pool, sid)
        == settled
        == ["turn.started", "tool.called", "tool.returned", "turn.started", "turn.completed"]
    )
    assert cluster.journal_keys(sid) == [
        f"effect-{(await fetch(pool, 'SELECT id FROM turns'))[0][0]}"
    ]
    assert await turn_states(pool) == [("succeeded", 2)]
    successor.signal(signal.SIGTERM)
    assert successor.wait() == 0
    await _assert_checks_pass(pool, cluster)


async def test_crash_kill9_mid_turn_is_recovered_with_each_effect_once(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    victim = cluster.start_worker(slots=2)
    sessions = await _enqueue(client, 2, {"min_wait_ms": 0, "gate": "g"})
    for sid in sessions:
        await wait_until(partial(_has_event, pool, sid, "tool.returned"), what="effects")
    victim.signal(signal.SIGKILL)
    victim.wait()
    rescuer = cluster.start_worker(slots=2)
    for sid in sessions:
        await wait_until(partial(_has_event, pool, sid, "turn.started", 2), what="recovery")
    cluster.open_gate("g")
    await wait_until(lambda: _all_finished(pool, 2), what="recovered turns finished")
    assert await turn_states(pool) == [("succeeded", 2)] * 2
    for sid in sessions:
        assert len(cluster.journal_keys(sid)) == 1
    steps = await fetch(pool, "SELECT status, count(*) FROM steps GROUP BY status")
    assert steps == [("committed", 2)]
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait() == 0
    await _assert_checks_pass(pool, cluster)


async def test_drain_hands_back_unfinished_turns_for_immediate_replay(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    first = cluster.start_worker(slots=2, drain_seconds=0.3, lease_seconds=30)
    sessions = await _enqueue(client, 2, {"min_wait_ms": 0, "gate": "g"})
    for sid in sessions:
        await wait_until(partial(_has_event, pool, sid, "tool.returned"), what="effects")
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    assert await turn_states(pool) == [("queued", 1)] * 2
    leases = await fetch(pool, "SELECT status, lease_owner FROM sessions")
    assert leases == [("ready", None)] * 2
    assert await fetch(pool, "SELECT state FROM workers") == [("stopped",)]
    # A 30 s lease was released, not left to expire: the next worker resumes at once.
    second = cluster.start_worker(slots=2)
    cluster.open_gate("g")
    await wait_until(lambda: _all_finished(pool, 2), what="handed-back turns finished")
    assert await turn_states(pool) == [("succeeded", 2)] * 2
    for sid in sessions:
        assert await event_kinds(pool, sid) == [
            "turn.started",
            "tool.called",
            "tool.returned",
            "turn.released",
            "turn.started",
            "turn.completed",
        ]
        assert len(cluster.journal_keys(sid)) == 1
    second.signal(signal.SIGTERM)
    assert second.wait() == 0
    await _assert_checks_pass(pool, cluster)


async def test_drain_lets_running_turns_finish(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    worker = cluster.start_worker(slots=2, drain_seconds=30)
    sessions = await _enqueue(client, 2, {"min_wait_ms": 0, "gate": "g"}, turns=2)
    for sid in sessions:
        await wait_until(partial(_has_event, pool, sid, "tool.returned"), what="running")
    worker.signal(signal.SIGTERM)

    async def draining() -> bool:
        return await fetch(pool, "SELECT state FROM workers") == [("draining",)]

    await wait_until(draining, what="worker draining")
    cluster.open_gate("g")
    assert worker.wait() == 0
    # The running turns finished; the second turn of each session was not started.
    assert sorted(await turn_states(pool)) == [("queued", 0)] * 2 + [("succeeded", 1)] * 2
    assert await fetch(pool, "SELECT DISTINCT status FROM sessions") == [("ready",)]
    report = await run_checks(pool, journals=cluster.workspace / "journals", quiesced=False)
    assert report.passed, report.as_json()


async def test_second_signal_skips_the_drain_wait(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    worker = cluster.start_worker(slots=1, drain_seconds=600)
    [sid] = await _enqueue(client, 1, {"min_wait_ms": 0, "gate": "never"})
    await wait_until(lambda: _has_event(pool, sid, "tool.returned"), what="running")
    worker.signal(signal.SIGTERM)

    async def draining() -> bool:
        return await fetch(pool, "SELECT state FROM workers") == [("draining",)]

    await wait_until(draining, what="worker draining")
    worker.signal(signal.SIGINT)
    assert worker.wait(timeout=60) == 0
    assert await event_kinds(pool, sid) == [
        "turn.started",
        "tool.called",
        "tool.returned",
        "turn.released",
    ]


async def test_a_worker_holds_a_few_named_connections_whatever_its_slots(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    """16 slots, and still only the pool's two connections plus the listener's, and the
    background pool's one (the scheduler's looks; the deliverer, without a webhook key,
    sends nothing)."""
    worker = cluster.start_worker(slots=16)

    async def connections() -> dict[str, int]:
        rows = await fetch(
            pool,
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'stint-worker-%%' "
            "GROUP BY application_name",
        )
        found = {r[0]: int(r[1]) for r in rows}
        return found if sum(found.values()) >= 4 else {}

    assert await wait_until(connections, what="the worker connected") == {
        "stint-worker-pool": 2,
        "stint-worker-listen": 1,
        "stint-worker-background": 1,
    }
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


async def test_console_tracing_shows_turn_spans_without_secrets(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    cluster.env["STINT_TRACING"] = "console"
    traced = cluster.start_worker(slots=1)
    await _enqueue(client, 1, {"min_wait_ms": 0})
    await wait_until(lambda: _all_finished(pool, 1), what="turn finished")
    traced.signal(signal.SIGTERM)
    assert traced.wait() == 0
    log = traced.log_text()
    assert '"name": "stint.turn"' in log
    assert '"status": "succeeded"' in log
    assert db.conninfo not in log
