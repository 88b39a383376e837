"""Child sessions in real workers: ``ctx.spawn`` / ``ctx.join`` free the parent's slot,
a replay finds the same child, failures are values, a cancel cascades, limits refuse."""

from __future__ import annotations

import json
import signal
from typing import Any
from uuid import UUID

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, event_kinds, fetch

_ENDED = ("succeeded", "failed", "cancelled", "interrupted")


async def _enqueue(client: ClientStore, key: str, turn_input: dict[str, Any]) -> UUID:
    queued = await client.turns_enqueue(session_id=None, idempotency_key=key, turn_input=turn_input)
    return queued.session_id


async def _ended(pool: Pool, session_id: UUID) -> tuple[str, Any, str | None] | None:
    rows = await fetch(
        pool, "SELECT status, output, error FROM turns WHERE session_id = %s", session_id
    )
    return rows[0] if rows[0][0] in _ENDED else None


async def _children(pool: Pool, parent: UUID) -> list[tuple[UUID, str | None]]:
    rows = await fetch(
        pool,
        "SELECT c.child_id, t.status FROM children c JOIN turns t ON t.id = c.child_turn_id "
        "WHERE c.parent_id = %s ORDER BY c.created_at",
        parent,
    )
    return [(r[0], r[1]) for r in rows]


async def _checks(pool: Pool, cluster: Cluster) -> None:
    report = await run_checks(pool, journals=cluster.workspace / "journals")
    assert report.passed, report.as_json()


async def test_a_parent_joins_its_children_from_a_freed_slot(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    # One slot: the children can only run because the joining parent gives it up.
    worker = cluster.start_worker(slots=1)
    parent = await _enqueue(
        client, "p", {"min_wait_ms": 0, "spawn": {"count": 3, "input": {"min_wait_ms": 0}}}
    )
    status, output, _ = await wait_until(lambda: _ended(pool, parent), what="the parent ends")
    assert status == "succeeded"
    kids = await _children(pool, parent)
    assert [(end["id"], end["status"]) for end in output["children"]] == [
        (str(cid), "succeeded") for cid, _ in kids
    ]
    assert all(end["output"]["effect"] for end in output["children"])
    kinds = await event_kinds(pool, parent)
    assert kinds.count("child.started") == 3 and kinds.count("child.finished") == 3
    rows = await fetch(pool, "SELECT parent_id, depth FROM sessions WHERE parent_id IS NOT NULL")
    assert rows == [(parent, 1)] * 3
    shown = cluster.stint("show", str(parent))
    assert shown.returncode == 0, shown.stderr
    tree = json.loads(shown.stdout)
    assert tree["parent_id"] is None
    assert [(c["session_id"], c["status"], c["children"]) for c in tree["children"]] == [
        (str(cid), "succeeded", []) for cid, _ in kids
    ]
    shown = cluster.stint("show", str(kids[0][0]))
    assert json.loads(shown.stdout)["parent_id"] == str(parent)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    await _checks(pool, cluster)


async def test_a_kill_after_a_spawn_finds_the_same_child_on_replay(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    doomed = cluster.start_worker(slots=2, failpoints="after_spawn:kill")
    one_by_one = {"count": 2, "input": {"min_wait_ms": 0}, "one_by_one": True}
    parent = await _enqueue(client, "p", {"min_wait_ms": 0, "spawn": one_by_one})
    assert doomed.wait() == -signal.SIGKILL
    [(first, _)] = await _children(pool, parent)  # the first spawn committed, then the kill
    successor = cluster.start_worker(slots=2)
    status, output, _ = await wait_until(lambda: _ended(pool, parent), what="the parent ends")
    assert status == "succeeded"
    kids = await _children(pool, parent)
    assert kids[0][0] == first and len(kids) == 2  # never a second first child
    assert [end["id"] for end in output["children"]] == [str(cid) for cid, _ in kids]
    successor.signal(signal.SIGTERM)
    assert successor.wait() == 0
    await _checks(pool, cluster)


async def _spawn_steps(pool: Pool, parent: UUID) -> list[str]:
    rows = await fetch(
        pool,
        "SELECT step_key FROM steps WHERE session_id = %s AND kind = 'spawn' ORDER BY step_key",
        parent,
    )
    return [r[0] for r in rows]


async def test_a_kill_after_spawn_many_finds_the_same_children_on_replay(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    doomed = cluster.start_worker(slots=2, failpoints="after_spawn:kill")
    parent = await _enqueue(
        client, "p", {"min_wait_ms": 0, "spawn": {"count": 3, "input": {"min_wait_ms": 0}}}
    )
    assert doomed.wait() == -signal.SIGKILL
    # The one statement committed all three children and their steps, then the kill.
    before = [cid for cid, _ in await _children(pool, parent)]
    assert len(before) == 3
    assert await _spawn_steps(pool, parent) == ["spawn:0", "spawn:1", "spawn:2"]
    successor = cluster.start_worker(slots=2)
    status, output, _ = await wait_until(lambda: _ended(pool, parent), what="the parent ends")
    assert status == "succeeded"
    assert [cid for cid, _ in await _children(pool, parent)] == before  # the same, no more
    assert [end["id"] for end in output["children"]] == [str(cid) for cid in before]
    assert [end["status"] for end in output["children"]] == ["succeeded"] * 3
    assert (await event_kinds(pool, parent)).count("child.started") == 3
    rows = await fetch(pool, "SELECT count(*) FROM sessions WHERE parent_id = %s", parent)
    assert rows == [(3,)]
    successor.signal(signal.SIGTERM)
    assert successor.wait() == 0
    await _checks(pool, cluster)


async def test_a_cancelled_child_is_a_value_its_parent_sees(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    worker = cluster.start_worker(slots=2)
    parent = await _enqueue(
        client,
        "p",
        {"min_wait_ms": 0, "spawn": {"count": 1, "input": {"min_wait_ms": 0, "wait_for": "x"}}},
    )

    async def child_waits() -> UUID | None:
        kids = await _children(pool, parent)
        if not kids or "wait.started" not in await event_kinds(pool, kids[0][0]):
            return None
        return kids[0][0]

    child = await wait_until(child_waits, what="the child waits")
    result = cluster.stint("cancel", str(child))
    assert result.returncode == 0, result.stderr
    status, output, _ = await wait_until(lambda: _ended(pool, parent), what="the parent ends")
    assert status == "succeeded"
    assert [end["status"] for end in output["children"]] == ["cancelled"]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    await _checks(pool, cluster)


async def test_a_cancel_of_the_parent_cascades_unless_abandoned(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    worker = cluster.start_worker(slots=2)
    forever = {"min_wait_ms": 0, "wait_for": "never"}
    parents = {
        policy: await _enqueue(
            client,
            policy,
            {"min_wait_ms": 0, "spawn": {"count": 2, "input": forever, "on_cancel": policy}},
        )
        for policy in ("cascade", "abandon")
    }

    async def all_wait() -> bool:
        for parent in parents.values():
            kids = await _children(pool, parent)
            if len(kids) != 2 or "wait.started" not in await event_kinds(pool, parent):
                return False
        return True

    await wait_until(all_wait, what="both parents wait for their children")
    for parent in parents.values():
        result = cluster.stint("cancel", str(parent))
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["cancelled_queued"]
    assert [s for _, s in await _children(pool, parents["cascade"])] == ["cancelled"] * 2
    # Abandoned children run on: waiting for their signal, or on their way to it.
    abandoned = await _children(pool, parents["abandon"])
    assert {status for _, status in abandoned} <= {"queued", "running"}
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


async def test_limits_refuse_a_child_and_write_nothing(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    result = cluster.stint("admission", "set", "--default", "--max-fanout", "2", "--max-depth", "1")
    assert result.returncode == 0, result.stderr
    worker = cluster.start_worker(slots=2)
    one_by_one = {"count": 3, "input": {"min_wait_ms": 0}, "one_by_one": True}
    wide = await _enqueue(client, "wide", {"min_wait_ms": 0, "spawn": one_by_one})
    status, _, error = await wait_until(lambda: _ended(pool, wide), what="the wide parent ends")
    assert status == "failed" and error is not None
    assert error.startswith("ChildRefused: child refused: max_fanout limit of 2")
    assert len(await _children(pool, wide)) == 2  # the third wrote nothing
    # One batch of three is refused whole: not cut down to the two that would fit.
    batch = await _enqueue(
        client, "batch", {"min_wait_ms": 0, "spawn": {"count": 3, "input": {"min_wait_ms": 0}}}
    )
    status, _, error = await wait_until(lambda: _ended(pool, batch), what="the batch parent ends")
    assert status == "failed" and error is not None
    assert error.startswith("ChildRefused: 3 children refused: max_fanout limit of 2")
    assert await _children(pool, batch) == []
    assert await _spawn_steps(pool, batch) == []
    assert "child.started" not in await event_kinds(pool, batch)
    rows = await fetch(pool, "SELECT count(*) FROM sessions WHERE parent_id = %s", batch)
    assert rows == [(0,)]
    deep = await _enqueue(
        client,
        "deep",
        {
            "min_wait_ms": 0,
            "spawn": {"count": 1, "input": {"min_wait_ms": 0, "spawn": {"count": 1}}},
        },
    )
    status, output, _ = await wait_until(lambda: _ended(pool, deep), what="the deep parent ends")
    [end] = output["children"]
    assert end["status"] == "failed" and "max_depth limit of 1" in end["error"]
    [(child, _)] = await _children(pool, deep)
    assert await _children(pool, child) == []
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    await _checks(pool, cluster)
