"""Retention against real PostgreSQL: what goes, what stays, and that every
invariant still holds afterwards (logs contiguous from their pruned head,
effects matching steps, nothing of a live turn touched)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
import time
import uuid
from pathlib import Path
from uuid import UUID

import pytest

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.dashboard_sessions import DashboardSessionStore
from stint.store.errors import UnknownSession
from stint.store.interleave import install_gate
from stint.store.keys import KeyStore
from stint.store.models import Claim, TurnStart
from stint.store.pool import Pool
from stint.store.quotas import QuotaLimits
from stint.store.retention import RetentionStore
from stint.store.schedules import NewSchedule, ScheduleStore
from stint.store.vocabulary import EventKind, StepKind, StepStatus, TurnStatus, WorkerState
from stint.store.worker_store import SqlWorkerStore
from stint.worker.journal import EffectJournal
from stint.worker.pruner import RetentionPlan, prune
from tests.integration.claims import claim_one
from tests.polling import wait_until
from tests.workers import count_rows, fetch

DAY = 86_400


def _plan(
    *,
    events: float = 30,
    turns: float = 30,
    workers: float = 7,
    sessions: float = 0,
    batch: int = 1000,
) -> RetentionPlan:
    return RetentionPlan(
        events_days=events,
        turns_days=turns,
        workers_days=workers,
        batch=batch,
        every_seconds=3600,
        idle_sessions_days=sessions,
    )


class History:
    """Turns run through the worker's own statements, each with one journalled effect."""

    def __init__(self, db: ScratchTarget, pool: Pool, root: Path) -> None:
        self.client = ClientStore(db.config, pool)
        self.runtime = SqlWorkerStore(db.config, pool, concurrency=2)
        self.pool = pool
        self.journal = EffectJournal(root)

    async def run(self, session: UUID | None, key: str) -> tuple[Claim, TurnStart]:
        """Enqueue, claim and finish one turn (with a committed tool step)."""
        queued = await self.client.turns_enqueue(
            session_id=session, idempotency_key=key, turn_input={"k": key}
        )
        claim, turn = await claim_one(self.runtime, "w")
        assert claim.session_id == queued.session_id
        step = f"effect-{turn.turn_id}"
        await self.runtime.steps_start(
            claim, turn_id=turn.turn_id, step_key=step, kind=StepKind.TOOL, digest="d"
        )
        self.journal.append(claim.session_id, step, {"turn_id": str(turn.turn_id)})
        await self.runtime.steps_finish(
            claim,
            turn_id=turn.turn_id,
            step_key=step,
            status=StepStatus.COMMITTED,
            result={"ok": True},
            events=[(EventKind.TOOL_RETURNED, {"step_key": step})],
        )
        await self.runtime.conversation.messages_append(
            claim, turn_id=turn.turn_id, messages=[{"role": "user", "content": key}]
        )
        await self.runtime.turns_finish(
            claim,
            turn_id=turn.turn_id,
            status=TurnStatus.SUCCEEDED,
            output={},
            error=None,
            events=[(EventKind.TURN_COMPLETED, {})],
            release=True,
        )
        return claim, turn

    async def age(self, turn_ids: list[UUID], days: float) -> None:
        """Make these turns look finished ``days`` ago."""
        await fetch(
            self.pool,
            "UPDATE turns SET finished_at = now() - make_interval(days => %s) "
            "WHERE id = ANY(%s) RETURNING id",
            days,
            turn_ids,
        )

    async def checks_pass(self, *, quiesced: bool = True) -> None:
        report = await run_checks(self.pool, journals=self.journal.root, quiesced=quiesced)
        assert report.passed, [(c.name, c.evidence) for c in report.checks if not c.passed]


@pytest.fixture
def history(db: ScratchTarget, pool: Pool, tmp_path: Path) -> History:
    return History(db, pool, tmp_path / "journals")


async def test_a_pruned_turn_takes_its_quota_reservations_but_not_the_counters(
    db: ScratchTarget, pool: Pool, history: History
) -> None:
    quotas = history.runtime.quotas
    await quotas.quota_set("p", QuotaLimits(rpm=10))
    claim, old = await history.run(None, "old")
    await quotas.quota_reserve(claim, scope="p", key="k", turn_id=old.turn_id, estimate=9)
    await quotas.quota_settle(scope="p", key="k", actual=4)
    await history.age([old.turn_id], days=40)
    report = await prune(
        RetentionStore(db.config, pool),
        _plan(),
        journals=history.journal,
        worker="t",
        every_seconds=0,
    )
    assert (report.turns, report.reservations) == (1, 1)
    [scope] = await quotas.quota_list("p")
    assert (scope.requests_reserved, scope.tokens_reconciled, scope.tokens_refunded) == (1, 4, 5)
    await history.checks_pass()


async def test_old_turns_go_with_their_steps_messages_events_and_journal_lines(
    db: ScratchTarget, pool: Pool, history: History
) -> None:
    old_claim, old = await history.run(None, "old")
    session = old_claim.session_id
    _, recent = await history.run(session, "recent")
    await history.age([old.turn_id], days=40)
    before = await history.client.events_after(session_id=session, after=0)
    report = await prune(
        RetentionStore(db.config, pool),
        _plan(),
        journals=history.journal,
        worker="t",
        every_seconds=0,
    )
    assert (report.turns, report.steps, report.messages) == (1, 1, 1)
    assert report.events == 3  # the old turn's turn.started, tool.returned, turn.completed
    kept = await history.client.events_after(session_id=session, after=0)
    assert [e.seq for e in kept] == [e.seq for e in before][report.events :]
    assert {e.turn_id for e in kept} == {recent.turn_id}
    rows = await fetch(
        pool, "SELECT events_pruned_through, turns_pruned FROM sessions WHERE id = %s", session
    )
    assert rows == [(report.events, 1)]
    assert [str(t) for (t,) in await fetch(pool, "SELECT id FROM turns")] == [str(recent.turn_id)]
    await history.checks_pass()  # contiguous from the pruned head; journal lines accounted


async def test_the_events_pass_alone_keeps_the_turns_and_resumes_where_it_stopped(
    db: ScratchTarget, pool: Pool, history: History
) -> None:
    olds = [(await history.run(None, f"s{i}"))[1].turn_id for i in range(25)]
    await history.age(olds, days=40)
    store = RetentionStore(db.config, pool)
    plan = _plan(events=30, turns=0, batch=10)
    first = await prune(store, plan, journals=None, worker="t", every_seconds=0)
    assert first.batches == 3 and first.turns == 0
    assert first.events == 25 * 3  # each session's whole log: its one turn is old
    assert await count_rows(pool, "turns") == 25
    again = await prune(store, plan, journals=None, worker="t", every_seconds=0)
    assert (again.events, again.batches) == (0, 1)  # it starts where the last run stopped
    await history.checks_pass()


async def test_only_one_worker_takes_an_interval(db: ScratchTarget, pool: Pool) -> None:
    store = RetentionStore(db.config, pool)
    assert await store.maintenance_take(task="prune", worker="a", every_seconds=3600) is not None
    assert await store.maintenance_take(task="prune", worker="b", every_seconds=3600) is None
    assert await store.maintenance_take(task="prune", worker="c", every_seconds=0) is not None


async def test_stopped_workers_rows_go(db: ScratchTarget, pool: Pool) -> None:
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    for name in ("gone", "kept"):
        await runtime.workers_register(
            worker_id=name, host="h", pid=1, version="v", pins=[], slots=1, lease_seconds=30
        )
        await runtime.workers_set_state(worker_id=name, pid=1, state=WorkerState.STOPPED)
    await fetch(
        pool,
        "UPDATE workers SET stopped_at = now() - interval '8 days' WHERE id = 'gone' RETURNING id",
    )
    report = await prune(
        RetentionStore(db.config, pool), _plan(), journals=None, worker="t", every_seconds=0
    )
    assert report.workers == 1
    assert await fetch(pool, "SELECT id FROM workers") == [("kept",)]


async def test_a_quiet_journal_of_a_session_with_nothing_left_is_removed(
    db: ScratchTarget, pool: Pool, history: History
) -> None:
    claim, old = await history.run(None, "old")
    busy_claim, busy = await history.run(None, "busy")
    await history.age([old.turn_id, busy.turn_id], days=40)
    quiet = time.time() - 40 * DAY
    os.utime(history.journal.path_for(claim.session_id), (quiet, quiet))
    # busy's journal was written just now: whatever the database says, it stays
    report = await prune(
        RetentionStore(db.config, pool),
        _plan(),
        journals=history.journal,
        worker="t",
        every_seconds=0,
    )
    assert report.journals == 1
    assert not history.journal.path_for(claim.session_id).exists()
    assert history.journal.path_for(busy_claim.session_id).exists()
    await history.checks_pass()


def test_an_append_waiting_on_a_journal_being_removed_writes_to_a_new_one(tmp_path: Path) -> None:
    journal = EffectJournal(tmp_path)
    session = uuid.uuid4()
    journal.append(session, "first", {})
    path = journal.path_for(session)
    holder = os.open(path, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # retention holds the lock...
    appended = threading.Thread(target=journal.append, args=(session, "second", {}))
    appended.start()
    inode = os.fstat(holder).st_ino
    deadline = time.monotonic() + 10
    while not _lock_awaited(inode):  # the append opened this file and waits for its lock
        assert time.monotonic() < deadline, "the append never waited for the lock"
        time.sleep(0.001)
    path.unlink()  # ...removes the file...
    os.close(holder)  # ...and lets the append go on
    appended.join(timeout=10)
    assert [e["key"] for e in journal.entries(session)] == ["second"]


def _lock_awaited(inode: int) -> bool:
    """Does some process wait for a lock on this inode? (/proc/locks marks
    waiters with "->"; the sixth field is major:minor:inode.)"""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and fields[fields.index("->") + 5].rsplit(":", 1)[-1] == str(inode):
            return True
    return False


async def test_an_event_left_without_its_turn_fails_the_checks(history: History) -> None:
    """Events have no foreign key to turns (migration 0011: it made every pruned
    turn a scan of the events table); the checks stand in for it."""
    _, turn = await history.run(None, "orphaned")
    await history.checks_pass()
    for statement in (
        "DELETE FROM steps WHERE turn_id = %s RETURNING 1",
        "DELETE FROM conversation_messages WHERE turn_id = %s RETURNING 1",
        "DELETE FROM turns WHERE id = %s RETURNING 1",
    ):
        await fetch(history.pool, statement, turn.turn_id)
    report = await run_checks(history.pool, journals=history.journal.root, quiesced=False)
    [identities] = [c for c in report.checks if c.name == "consistent_identities"]
    assert not identities.passed
    assert {m["what"] for m in identities.evidence["mismatches"]} == {"event_turn_missing"}


async def _age_sessions(pool: Pool, days: float) -> None:
    """Make every session look unchanged for ``days``."""
    await fetch(
        pool,
        "UPDATE sessions SET updated_at = now() - make_interval(days => %s) RETURNING id",
        days,
    )


async def test_idle_sessions_with_no_turn_left_go_after_their_horizon(
    db: ScratchTarget, pool: Pool, history: History
) -> None:
    """Never used, or every turn pruned: gone once unchanged for the horizon. A
    session with a turn, a recent one, a non-idle one and a schedule's target stay."""
    client, store = history.client, RetentionStore(db.config, pool)
    never_used = [await client.sessions_create(tenant="acme") for _ in range(25)]
    old_claim, old = await history.run(None, "old")  # its turn is pruned below
    kept_claim, _ = await history.run(None, "kept")  # a turn younger than the turns horizon
    queued = await client.turns_enqueue(session_id=None, idempotency_key="q", turn_input={})
    target = await client.sessions_create(tenant="acme")
    await ScheduleStore(db.config, pool).create(
        NewSchedule(tenant="acme", name="n", input={}, every=60, session_id=target)
    )
    await _age_sessions(pool, 40)
    recent = await client.sessions_create(tenant="acme")
    await history.age([old.turn_id], days=40)
    quiet = time.time() - 40 * DAY
    os.utime(history.journal.path_for(old_claim.session_id), (quiet, quiet))
    report = await prune(
        store, _plan(sessions=30, batch=10), journals=history.journal, worker="t", every_seconds=0
    )
    assert (report.turns, report.sessions, report.journals) == (1, 26, 1)
    left = {row[0] for row in await fetch(pool, "SELECT id FROM sessions")}
    assert left == {kept_claim.session_id, queued.session_id, target, recent}
    assert not left & {*never_used, old_claim.session_id}
    await history.checks_pass(quiesced=False)  # one turn is left queued on purpose
    again = await prune(store, _plan(sessions=30), journals=None, worker="t", every_seconds=0)
    assert again.sessions == 0
    # 0 keeps them, as the other horizons do.
    await _age_sessions(pool, 40)
    await fetch(pool, "DELETE FROM schedules RETURNING id")
    kept = await prune(store, _plan(sessions=0), journals=None, worker="t", every_seconds=0)
    assert kept.sessions == 0 and await count_rows(pool, "sessions") == 4


async def test_a_session_an_enqueue_holds_is_not_pruned_and_gets_its_turn(
    db: ScratchTarget, pool: Pool, history: History
) -> None:
    """An enqueue locks the session row first: retention skips it while held, and the
    enqueue's turn is then the session's (nothing deleted under it)."""
    session = await history.client.sessions_create()
    await _age_sessions(pool, 40)
    store = RetentionStore(db.config, pool)
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session,))
        assert await store.prune_idle_sessions(horizon_seconds=30 * DAY, batch=10) == 0
    queued = await history.client.turns_enqueue(
        session_id=session, idempotency_key="k", turn_input={}
    )
    assert queued.created
    assert await store.prune_idle_sessions(horizon_seconds=30 * DAY, batch=10) == 0
    assert await count_rows(pool, "turns") == 1


async def test_a_session_retention_holds_is_unknown_to_an_enqueue_that_waited(
    db: ScratchTarget, pool: Pool, history: History
) -> None:
    """The other order: retention locked the session first; an enqueue that waited
    for the lock finds no session (UnknownSession) and writes nothing."""
    session = await history.client.sessions_create()
    await _age_sessions(pool, 40)
    locked = asyncio.Event()
    release = asyncio.Event()

    async def gate(statement: str) -> None:
        if statement == "prune_idle_sessions":  # its lock statement ran: hold it here
            locked.set()
            await release.wait()

    async def prune_holding_the_lock() -> int:
        install_gate(gate)  # this task's context only
        return await RetentionStore(db.config, pool).prune_idle_sessions(
            horizon_seconds=30 * DAY, batch=10
        )

    holder = asyncio.create_task(prune_holding_the_lock())
    await locked.wait()
    enqueue = asyncio.create_task(
        history.client.turns_enqueue(session_id=session, idempotency_key="k", turn_input={})
    )
    await wait_until(lambda: _lock_waiters(pool), what="the enqueue waits for the session lock")
    release.set()
    assert await holder == 1
    with pytest.raises(UnknownSession):
        await enqueue
    assert (await count_rows(pool, "sessions"), await count_rows(pool, "turns")) == (0, 0)


async def _lock_waiters(pool: Pool) -> int:
    """Backends of this database now waiting for a lock another one holds."""
    [(waiting,)] = await fetch(
        pool,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0",
    )
    return int(waiting)


async def test_ended_dashboard_sign_ins_go(db: ScratchTarget, pool: Pool) -> None:
    key = await KeyStore(db.config, pool).keys_create(tenant="acme")
    signins = DashboardSessionStore(db.config, pool)
    live = await signins.sessions_open(key_id=key.key.id, seconds=3600)
    signed_out = await signins.sessions_open(key_id=key.key.id, seconds=3600)
    await signins.sessions_revoke(token=signed_out)
    for _ in range(12):
        await signins.sessions_open(key_id=key.key.id, seconds=3600)
    await fetch(
        pool,
        "UPDATE dashboard_sessions SET created_at = now() - interval '2 hours', "
        "expires_at = now() - interval '1 hour' WHERE revoked_at IS NULL AND id <> %s "
        "RETURNING id",
        live.split("_")[1],
    )
    report = await prune(
        RetentionStore(db.config, pool),
        _plan(batch=10),
        journals=None,
        worker="t",
        every_seconds=0,
    )
    assert report.dashboard_sessions == 13
    assert await count_rows(pool, "dashboard_sessions") == 1
    assert await signins.sessions_verify(token=live) is not None
