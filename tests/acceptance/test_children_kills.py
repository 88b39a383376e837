"""Kill -9 at the child sessions' step boundaries: right after a spawn committed, while
the parent waits in its join with its children running, and while the parent's turn
resumes after the join. After each: no child created twice, each child's effect once
(the native effect journal), the parent ends with every child's output, and
``stint check`` passes."""

from __future__ import annotations

import signal
from typing import Any
from uuid import UUID

import pytest

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, event_kinds, fetch

_CHILDREN = 3
_ENDED = ("succeeded", "failed", "cancelled", "interrupted")


async def _delegating_parent(pool: Pool, db: ScratchTarget, *, gate: str | None) -> UUID:
    """A parent that spawns three children one statement each (``ctx.spawn``: a kill
    after the first leaves one), each one effect then ``gate`` if named, and joins them."""
    child: dict[str, Any] = {"min_wait_ms": 0}
    if gate is not None:
        child["gate"] = gate
    queued = await ClientStore(db.config, pool).turns_enqueue(
        session_id=None,
        idempotency_key="parent",
        turn_input={
            "min_wait_ms": 0,
            "spawn": {"count": _CHILDREN, "input": child, "one_by_one": True},
        },
    )
    return queued.session_id


async def _children(pool: Pool, parent: UUID) -> list[tuple[UUID, UUID, str]]:
    """The parent's children as linked: id, spawned turn, that turn's status."""
    rows = await fetch(
        pool,
        "SELECT c.child_id, c.child_turn_id, t.status FROM children c "
        "JOIN turns t ON t.id = c.child_turn_id WHERE c.parent_id = %s ORDER BY c.step_key",
        parent,
    )
    return [(r[0], r[1], r[2]) for r in rows]


async def _parked_on_join_with_children_running(pool: Pool, parent: UUID) -> bool:
    kids = await _children(pool, parent)
    return (
        len(kids) == _CHILDREN
        and "wait.started" in await event_kinds(pool, parent)
        and all(status == "running" for _, _, status in kids)
    )


async def _ended(pool: Pool, session_id: UUID) -> tuple[str, Any] | None:
    [(status, output)] = await fetch(
        pool, "SELECT status, output FROM turns WHERE session_id = %s", session_id
    )
    return (status, output) if status in _ENDED else None


async def _assert_once_each(
    cluster: Cluster, pool: Pool, parent: UUID, before: list[tuple[UUID, UUID, str]]
) -> None:
    """What every kill must leave: the same children, none twice, each effect once,
    every child's output in the parent's, the checker content."""
    status, output = await wait_until(lambda: _ended(pool, parent), what="the parent ends")
    assert status == "succeeded"
    kids = await _children(pool, parent)
    assert [(cid, tid) for cid, tid, _ in kids[: len(before)]] == [
        (cid, tid) for cid, tid, _ in before
    ]  # a replay found the children spawned before the kill
    assert len(kids) == _CHILDREN
    assert await fetch(pool, "SELECT count(*) FROM sessions WHERE parent_id = %s", parent) == [
        (_CHILDREN,)
    ]
    for cid, tid, _ in kids:
        assert cluster.journal_keys(cid) == [f"effect-{tid}"]  # each child's effect once
    assert [(end["id"], end["status"], end["output"]["effect"]) for end in output["children"]] == [
        (str(cid), "succeeded", f"effect-{tid}") for cid, tid, _ in kids
    ]
    kinds = await event_kinds(pool, parent)
    assert kinds.count("child.started") == _CHILDREN
    assert kinds.count("child.finished") == _CHILDREN
    report = await run_checks(pool, journals=cluster.workspace / "journals")
    assert report.passed, report.as_json()


async def _stop(cluster: Cluster) -> None:
    for worker in cluster.workers:
        if worker.proc.poll() is None:
            worker.signal(signal.SIGTERM)
            assert worker.wait() == 0


async def test_a_kill_right_after_a_spawn_committed(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    doomed = cluster.start_worker(slots=2, failpoints="after_spawn:kill")
    parent = await _delegating_parent(pool, db, gate=None)
    assert doomed.wait() == -signal.SIGKILL
    before = await _children(pool, parent)
    assert len(before) == 1  # the first spawn committed, then the kill
    cluster.start_worker(slots=2)
    await _assert_once_each(cluster, pool, parent, before)
    await _stop(cluster)


@pytest.mark.parametrize("kill", ["signal", "after_wait_begun"])
async def test_a_kill_while_the_parent_waits_in_its_join(
    cluster: Cluster, db: ScratchTarget, pool: Pool, kill: str
) -> None:
    """``signal``: the worker running the children, the parent set aside in its join,
    is killed by the test; ``after_wait_begun``: the worker is killed by the failpoint
    as the join's step is recorded started, before the parent is set aside."""
    failpoints = {"failpoints": "after_wait_begun:kill"} if kill == "after_wait_begun" else {}
    doomed = cluster.start_worker(slots=_CHILDREN + 1, **failpoints)
    parent = await _delegating_parent(pool, db, gate="go")
    if kill == "signal":
        await wait_until(
            lambda: _parked_on_join_with_children_running(pool, parent),
            what="the parent waits in its join, every child running",
        )
        doomed.signal(signal.SIGKILL)
    assert doomed.wait() == -signal.SIGKILL
    before = await _children(pool, parent)
    assert len(before) == _CHILDREN
    cluster.start_worker(slots=_CHILDREN + 1)
    cluster.open_gate("go")
    await _assert_once_each(cluster, pool, parent, before)
    await _stop(cluster)


async def test_a_kill_while_the_parent_resumes_after_its_join(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    """The join's step committed with the children's ends (the failpoint kills right
    after it): the next worker's replay reads the ends from that step."""
    doomed = cluster.start_worker(slots=_CHILDREN + 1, failpoints="after_wait_settled:kill")
    parent = await _delegating_parent(pool, db, gate="go")
    await wait_until(
        lambda: _parked_on_join_with_children_running(pool, parent),
        what="the parent waits in its join, every child running",
    )
    cluster.open_gate("go")
    assert doomed.wait() == -signal.SIGKILL
    [(committed,)] = await fetch(
        pool,
        "SELECT count(*) FROM steps WHERE session_id = %s AND kind = 'wait' "
        "AND status = 'committed'",
        parent,
    )
    assert committed == 1  # the kill came after the join settled
    before = await _children(pool, parent)
    cluster.start_worker(slots=2)
    await _assert_once_each(cluster, pool, parent, before)
    assert (await event_kinds(pool, parent)).count("wait.finished") == 1
    await _stop(cluster)
