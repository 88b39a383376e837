"""Acceptance: cancel, interrupt, timeouts, approvals that park, pins, busy input, fairness."""

from __future__ import annotations

import json
import signal
from functools import partial
from uuid import UUID

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from stint.store.vocabulary import AdmissionLimit
from tests.polling import wait_until
from tests.workers import Cluster, WorkerProc, event_kinds, fetch, set_limits


async def _enqueue(cluster: Cluster, payload: dict[str, object], *args: str) -> dict[str, str]:
    result = cluster.stint("enqueue", *args, json.dumps(payload))
    assert result.returncode == 0, result.stderr
    line: dict[str, str] = json.loads(result.stdout)
    return line


async def _turn(pool: Pool, turn_id: str) -> tuple[str, int, str | None]:
    rows = await fetch(pool, "SELECT status, attempts, reason FROM turns WHERE id = %s", turn_id)
    return rows[0]


async def _status_is(pool: Pool, turn_id: str, status: str) -> bool:
    return (await _turn(pool, turn_id))[0] == status


async def _has(pool: Pool, session: str, kind: str, count: int = 1) -> bool:
    return (await event_kinds(pool, UUID(session))).count(kind) >= count


async def _checks_pass(pool: Pool, cluster: Cluster, *, quiesced: bool = True) -> None:
    report = await run_checks(pool, journals=cluster.workspace / "journals", quiesced=quiesced)
    assert report.passed, report.as_json()


async def _drain_and_check(worker: WorkerProc, pool: Pool, cluster: Cluster) -> None:
    """SIGTERM drains and exits 0; then every invariant holds."""
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    await _checks_pass(pool, cluster)


async def _flag_cancel(pool: Pool, turn: dict[str, str]) -> None:
    """The cancel flag alone on the session row, as if its NOTIFY had been lost."""
    await fetch(
        pool,
        "UPDATE sessions SET control = 'cancel', control_turn_id = %s, control_reason = 'test', "
        "control_requested_at = clock_timestamp() WHERE id = %s RETURNING id",
        turn["turn_id"],
        turn["session_id"],
    )


async def test_cancel_reaches_the_running_turn_and_frees_its_slot(
    cluster: Cluster, pool: Pool
) -> None:
    worker = cluster.start_worker(slots=1, lease_seconds=30)  # renewals far apart: NOTIFY path
    turn = await _enqueue(cluster, {"min_wait_ms": 0, "gate": "never"})
    await wait_until(lambda: _has(pool, turn["session_id"], "tool.returned"), what="running")
    result = cluster.stint("cancel", turn["session_id"])
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["active_turn"] == turn["turn_id"]
    assert outcome["outcome"].startswith("requested from worker")
    await wait_until(lambda: _status_is(pool, turn["turn_id"], "cancelled"), what="cancelled")
    assert (await event_kinds(pool, UUID(turn["session_id"])))[-1] == "turn.cancelled"
    after = await _enqueue(cluster, {"min_wait_ms": 0})
    await wait_until(lambda: _status_is(pool, after["turn_id"], "succeeded"), what="slot reused")
    await _drain_and_check(worker, pool, cluster)


async def test_a_missed_notification_is_caught_by_the_lease_keeper(
    cluster: Cluster, pool: Pool
) -> None:
    worker = cluster.start_worker(slots=1)  # lease 1 s: renewals every ~0.33 s
    turn = await _enqueue(cluster, {"min_wait_ms": 0, "gate": "never"})
    await wait_until(lambda: _has(pool, turn["session_id"], "tool.returned"), what="running")
    await _flag_cancel(pool, turn)
    await wait_until(lambda: _status_is(pool, turn["turn_id"], "cancelled"), what="cancelled")
    assert (await _turn(pool, turn["turn_id"]))[2] == "test"
    assert await fetch(pool, "SELECT control FROM sessions") == [(None,)]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


async def test_cancel_ends_queued_turns_in_the_database(cluster: Cluster, pool: Pool) -> None:
    first = await _enqueue(cluster, {})
    for _ in range(2):
        await _enqueue(cluster, {}, "--session", first["session_id"])
    result = cluster.stint("cancel", first["session_id"], "--reason", "changed my mind")
    outcome = json.loads(result.stdout)
    assert len(outcome["cancelled_queued"]) == 3
    assert outcome["outcome"] == "cancelled 3 queued turn(s); no turn was running"
    assert await event_kinds(pool, UUID(first["session_id"])) == ["turn.cancelled"] * 3
    assert await fetch(pool, "SELECT status, queued_turns FROM sessions") == [("idle", 0)]
    await _checks_pass(pool, cluster)


async def test_interrupt_stops_only_the_running_turn(cluster: Cluster, pool: Pool) -> None:
    worker = cluster.start_worker(slots=1)
    running = await _enqueue(cluster, {"min_wait_ms": 0, "gate": "never"})
    queued = await _enqueue(cluster, {"min_wait_ms": 0}, "--session", running["session_id"])
    await wait_until(lambda: _has(pool, running["session_id"], "tool.returned"), what="running")
    assert cluster.stint("interrupt", running["session_id"]).returncode == 0
    await wait_until(lambda: _status_is(pool, queued["turn_id"], "succeeded"), what="next turn")
    assert (await _turn(pool, running["turn_id"]))[0] == "interrupted"
    await _drain_and_check(worker, pool, cluster)


async def test_cancel_without_a_live_worker_ends_the_turn_and_fences_the_owner(
    cluster: Cluster, pool: Pool
) -> None:
    victim = cluster.start_worker(slots=1)
    turn = await _enqueue(cluster, {"min_wait_ms": 0, "gate": "never"})
    await wait_until(lambda: _has(pool, turn["session_id"], "tool.returned"), what="running")
    victim.signal(signal.SIGKILL)
    victim.wait()

    async def lease_expired() -> bool:
        rows = await fetch(pool, "SELECT lease_expires_at < now() FROM sessions")
        return bool(rows[0][0])

    await wait_until(lease_expired, what="the dead worker's lease expired")
    epoch = (await fetch(pool, "SELECT lease_epoch FROM sessions"))[0][0]
    outcome = json.loads(cluster.stint("cancel", turn["session_id"]).stdout)["outcome"]
    assert outcome == "cancelled in the database (no live worker holds its lease)"
    assert (await _turn(pool, turn["turn_id"]))[0] == "cancelled"
    assert await fetch(pool, "SELECT status, lease_owner, lease_epoch FROM sessions") == [
        ("idle", None, epoch + 1)
    ]
    await _checks_pass(pool, cluster)


async def test_overlong_turns_are_interrupted_with_reason_timeout(
    cluster: Cluster, pool: Pool
) -> None:
    worker = cluster.start_worker(slots=2, turn_timeout=30)
    per_turn = await _enqueue(cluster, {"min_wait_ms": 0, "gate": "never"}, "--timeout", "0.3")
    await wait_until(lambda: _status_is(pool, per_turn["turn_id"], "interrupted"), what="timeout")
    assert (await _turn(pool, per_turn["turn_id"]))[2] == "timeout"
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    default = cluster.start_worker(slots=1, turn_timeout=0.3)
    turn = await _enqueue(cluster, {"min_wait_ms": 0, "gate": "never"})
    await wait_until(lambda: _status_is(pool, turn["turn_id"], "interrupted"), what="timeout")
    default.signal(signal.SIGTERM)
    assert default.wait() == 0
    await _checks_pass(pool, cluster)


async def test_a_cancel_requested_before_the_question_is_not_lost_by_parking(
    cluster: Cluster, pool: Pool
) -> None:
    """The cancel flag lands (its NOTIFY lost) while the turn runs towards a question;
    renewals are 10 s apart, so only the park can see it: the park must end the turn as
    cancelled, not leave it parked waiting for an answer with the request forgotten."""
    worker = cluster.start_worker(slots=1, lease_seconds=30)
    turn = await _enqueue(cluster, {"min_wait_ms": 0, "gate": "g", "ask": "deploy?"})
    sid = turn["session_id"]
    await wait_until(lambda: _has(pool, sid, "tool.returned"), what="running")
    await _flag_cancel(pool, turn)
    cluster.open_gate("g")  # the harness goes on to ask
    await wait_until(lambda: _status_is(pool, turn["turn_id"], "cancelled"), what="cancelled")
    assert await event_kinds(pool, UUID(sid)) == [
        "turn.started",
        "tool.called",
        "tool.returned",
        "turn.cancelled",
    ]
    assert await fetch(
        pool, "SELECT status, control, lease_owner FROM sessions WHERE id = %s", sid
    ) == [("idle", None, None)]
    assert await fetch(pool, "SELECT count(*) FROM steps WHERE kind = 'answer'") == [(0,)]
    await _drain_and_check(worker, pool, cluster)


async def test_a_question_parks_frees_the_slot_and_the_answer_resumes_the_turn(
    cluster: Cluster, pool: Pool
) -> None:
    worker = cluster.start_worker(slots=1)
    asked = await _enqueue(cluster, {"min_wait_ms": 0, "ask": "deploy?"})
    sid = asked["session_id"]
    await wait_until(lambda: _has(pool, sid, "approval.requested"), what="parked")
    assert await fetch(pool, "SELECT status, lease_owner FROM sessions WHERE id = %s", sid) == [
        ("parked", None)
    ]
    request = await fetch(pool, "SELECT payload FROM events WHERE kind = 'approval.requested'")
    step_key = request[0][0]["step_key"]
    assert request[0][0]["question"] == "deploy?"
    other = await _enqueue(cluster, {"min_wait_ms": 0})  # the one slot is free again
    await wait_until(lambda: _status_is(pool, other["turn_id"], "succeeded"), what="slot reused")
    answered = cluster.stint("answer", sid, step_key, '"yes"')
    assert answered.returncode == 0, answered.stderr
    await wait_until(lambda: _status_is(pool, asked["turn_id"], "succeeded"), what="resumed")
    rows = await fetch(pool, "SELECT output, attempts FROM turns WHERE id = %s", asked["turn_id"])
    assert rows[0][0]["answer"] == "yes" and rows[0][1] == 2
    assert await event_kinds(pool, UUID(sid)) == [
        "turn.started",
        "tool.called",
        "tool.returned",
        "approval.requested",
        "approval.answered",
        "turn.started",
        "turn.completed",
    ]
    assert len(cluster.journal_keys(UUID(sid))) == 1  # the effect did not run again
    # A retry with the same answer succeeds and writes nothing; another answer is refused.
    before = await event_kinds(pool, UUID(sid))
    retry = cluster.stint("answer", sid, step_key, '"yes"')
    assert retry.returncode == 0, retry.stderr
    assert json.loads(retry.stdout) == {**json.loads(answered.stdout), "created": False}
    again = cluster.stint("answer", sid, step_key, '"again"')
    assert again.returncode == 2 and "already answered with a different value" in again.stderr
    assert await event_kinds(pool, UUID(sid)) == before
    unknown = cluster.stint("answer", sid, "no-such-step", '"yes"')
    assert unknown.returncode == 2 and "no parked turn waiting" in unknown.stderr
    await _drain_and_check(worker, pool, cluster)


async def test_pinned_sessions_wait_for_a_worker_that_accepts_them(
    cluster: Cluster, pool: Pool
) -> None:
    v1 = cluster.start_worker(slots=2, pins="v1")
    plain = await _enqueue(cluster, {"min_wait_ms": 0})
    on_v1 = await _enqueue(cluster, {"min_wait_ms": 0}, "--pin", "v1")
    on_v2 = await _enqueue(cluster, {"min_wait_ms": 0}, "--pin", "v2")
    for turn in (plain, on_v1):
        await wait_until(partial(_status_is, pool, turn["turn_id"], "succeeded"), what="ran")
    status = json.loads(cluster.stint("status", "--json").stdout)
    assert status["ready_unaccepted"] == 1
    assert (await _turn(pool, on_v2["turn_id"]))[0] == "queued"
    v2 = cluster.start_worker(slots=1, pins="v2")
    await wait_until(lambda: _status_is(pool, on_v2["turn_id"], "succeeded"), what="v2 ran it")
    for worker in (v1, v2):
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    await _checks_pass(pool, cluster)


async def test_busy_sessions_reject_or_interrupt_new_input(cluster: Cluster, pool: Pool) -> None:
    worker = cluster.start_worker(slots=1)
    running = await _enqueue(cluster, {"min_wait_ms": 0, "gate": "never"})
    sid = running["session_id"]
    await wait_until(lambda: _has(pool, sid, "tool.returned"), what="running")
    before = await fetch(pool, "SELECT count(*) FROM turns")
    rejected = cluster.stint("enqueue", "--session", sid, "--busy", "reject", "{}")
    assert rejected.returncode == 3
    assert "session busy" in rejected.stderr
    assert await fetch(pool, "SELECT count(*) FROM turns") == before
    newer = await _enqueue(cluster, {"min_wait_ms": 0}, "--session", sid, "--busy", "interrupt")
    await wait_until(lambda: _status_is(pool, newer["turn_id"], "succeeded"), what="new input ran")
    assert await _turn(pool, running["turn_id"]) == ("interrupted", 1, "new input")
    await _drain_and_check(worker, pool, cluster)


async def test_a_long_queue_does_not_starve_short_sessions(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    await set_limits(pool, db.config, {AdmissionLimit.MAX_SESSION_QUEUE: 300})
    long = await client.turns_enqueue(
        session_id=None, idempotency_key="0", turn_input={"min_wait_ms": 0}
    )
    for i in range(1, 200):
        await client.turns_enqueue(
            session_id=long.session_id,
            idempotency_key=str(i),
            turn_input={"min_wait_ms": 0},
        )
    shorts = [
        await client.turns_enqueue(
            session_id=None, idempotency_key="s", turn_input={"min_wait_ms": 0}
        )
        for _ in range(20)
    ]
    worker = cluster.start_worker(slots=1, max_turns_per_claim=4)

    async def all_done() -> bool:
        rows = await fetch(pool, "SELECT count(*) FROM turns WHERE status = 'succeeded'")
        succeeded: int = rows[0][0]
        return succeeded == 220

    await wait_until(all_done, what="all 220 turns", within=120)
    rows = await fetch(
        pool,
        "SELECT (SELECT max(finished_at) FROM turns WHERE id = ANY(%s)), "
        "(SELECT finished_at FROM turns WHERE session_id = %s AND seq = 40)",
        [s.turn_id for s in shorts],
        long.session_id,
    )
    last_short, long_40th = rows[0]
    assert last_short < long_40th  # every short session ran before the long queue got far
    await _drain_and_check(worker, pool, cluster)
