"""Webhooks from real workers to a real receiver, with workers killed (SIGKILL) between
the outbox write and the delivery, and between the receiver's answer and its record:
every subscribed event is delivered at least once, always under one delivery id, and
the receiver, deduplicating by that id, processes each exactly once."""

from __future__ import annotations

import base64
import json
import os
import signal
from uuid import UUID

from stint.lab.webhook_receiver import Receiver, fail_twice_then_slow
from stint.ops.checks import run_checks
from stint.store.client import ClientStore
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, WorkerProc, fetch

WEBHOOK_KEY = base64.b64encode(os.urandom(32)).decode()
TIMEOUT_SECONDS = 1.0


def _start(
    cluster: Cluster, failpoints: str = "", slots: int = 2, delivers: bool = True
) -> WorkerProc:
    """A worker that delivers webhooks to loopback, polls often and retries fast
    (``delivers=False``: one without a deliverer, that only writes the outbox)."""
    return cluster.start_worker(
        slots=slots,
        webhook_key=WEBHOOK_KEY,
        webhook_allowed_networks="127.0.0.0/8",
        webhook_poll_seconds=0.1 if delivers else 0,
        webhook_retry_seconds=0.2,
        webhook_retry_max_seconds=0.5,
        webhook_timeout_seconds=TIMEOUT_SECONDS,
        schedule_poll_seconds=0,
        failpoints=failpoints,
    )


def _subscribe(cluster: Cluster, receiver: Receiver, *kinds: str) -> UUID:
    """``stint webhook create``; the receiver learns the secret printed once."""
    events = [arg for kind in kinds for arg in ("--event", kind)]
    made = cluster.stint(
        "webhook", "create", "--tenant", "acme", "--url", receiver.url, *events,
        STINT_WEBHOOK_KEY=WEBHOOK_KEY,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    shown = json.loads(made.stdout)
    receiver.secret = shown["secret"]
    assert shown["secret"] not in made.stderr
    return UUID(shown["webhook_id"])


async def _enqueue(cluster: Cluster, pool: Pool, key: str) -> UUID:
    """Through the store, not the CLI: the receiver answers in this event loop, which a
    blocking subprocess would stall (the sender would see timeouts it should not)."""
    queued = await ClientStore(cluster.db.config, pool).turns_enqueue(
        session_id=None, idempotency_key=key, turn_input={"min_wait_ms": 0}, tenant="acme"
    )
    return queued.session_id


async def _deliveries(pool: Pool) -> list[tuple[str, str, int]]:
    """(delivery id, status, attempts) of every delivery."""
    rows = await fetch(pool, "SELECT id, status, attempts FROM webhook_deliveries ORDER BY id")
    return [(str(r[0]), r[1], r[2]) for r in rows]


async def _all_delivered(pool: Pool, count: int) -> bool:
    rows = await _deliveries(pool)
    return len(rows) == count and all(status == "delivered" for _, status, _ in rows)


async def _exited(worker: WorkerProc) -> bool:
    return worker.proc.poll() is not None


async def _checks_pass(cluster: Cluster, pool: Pool) -> None:
    report = await run_checks(pool, journals=cluster.workspace / "journals")
    assert report.passed, report.as_json()
    assert {c.name for c in report.checks} >= {"outbox_complete", "no_tick_twice"}


async def test_killed_between_the_outbox_write_and_the_delivery(
    cluster: Cluster, pool: Pool, receiver: Receiver
) -> None:
    """The worker finishes the turn (the event and its outbox row commit together) and
    is killed at once: the delivery waits in the outbox, and the next worker sends it.

    The victim has no deliverer: with one, it could claim the delivery in the moment
    between the finish's commit and the kill (attempts 1, the rescuer waiting out the
    claim's lease), which the next test covers; here the kill must come first."""
    _subscribe(cluster, receiver, "turn.completed")
    victim = _start(cluster, failpoints="after_turn_finish:kill", delivers=False)
    await _enqueue(cluster, pool, "one")
    await wait_until(lambda: _exited(victim), what="the victim died after the finish")
    assert victim.proc.returncode == -signal.SIGKILL
    [(delivery_id, status, attempts)] = await _deliveries(pool)
    assert (status, attempts, receiver.requests) == ("pending", 0, [])
    rescuer = _start(cluster)
    await wait_until(lambda: _all_delivered(pool, 1), what="the delivery was delivered")
    assert receiver.processed_ids() == {delivery_id: 1}
    assert receiver.processed[0].document["type"] == "turn.completed"
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait() == 0
    await _checks_pass(cluster, pool)


async def test_killed_after_the_receiver_answered_before_the_record(
    cluster: Cluster, pool: Pool, receiver: Receiver
) -> None:
    """The receiver has the delivery and said 200, but the worker dies before recording
    it: once the claim's lease passes another worker sends it again, with the same
    webhook-id, and the receiver, deduplicating, processes it once."""
    _subscribe(cluster, receiver, "turn.completed")
    victim = _start(cluster, failpoints="webhook_after_send:kill")
    await _enqueue(cluster, pool, "one")
    await wait_until(lambda: _exited(victim), what="the victim died after sending")
    [(delivery_id, status, attempts)] = await _deliveries(pool)
    assert (status, attempts) == ("pending", 1)
    assert receiver.processed_ids() == {delivery_id: 1}
    rescuer = _start(cluster)
    await wait_until(lambda: _all_delivered(pool, 1), what="the delivery was recorded")
    assert await _deliveries(pool) == [(delivery_id, "delivered", 2)]
    assert dict(receiver.seen) == {delivery_id: 2}
    assert receiver.processed_ids() == {delivery_id: 1}
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait() == 0
    await _checks_pass(cluster, pool)


async def test_a_receiver_that_fails_twice_then_answers_late_processes_each_once(
    cluster: Cluster, pool: Pool, receiver: Receiver
) -> None:
    """Two workers, six turns, two subscribed kinds: every delivery's first two requests
    fail, its third is processed but answered after the sender's timeout, its fourth
    succeeds. From the receiver's point of view each delivery id came once."""
    _subscribe(cluster, receiver, "turn.started", "turn.completed")
    receiver.script = fail_twice_then_slow(slow_seconds=TIMEOUT_SECONDS + 1)
    workers = [_start(cluster, slots=3) for _ in range(2)]
    for n in range(6):
        await _enqueue(cluster, pool, f"t{n}")
    await wait_until(lambda: _all_delivered(pool, 12), what="12 deliveries delivered", within=120)
    rows = await _deliveries(pool)
    assert all(attempts >= 4 for _, _, attempts in rows)  # more if a loaded machine timed out
    assert receiver.processed_ids() == {delivery_id: 1 for delivery_id, _, _ in rows}
    assert all(r.signed for r in receiver.requests)
    kinds = sorted(r.document["type"] for r in receiver.processed)
    assert kinds == ["turn.completed"] * 6 + ["turn.started"] * 6
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait() for w in workers] == [0, 0]
    await _checks_pass(cluster, pool)
