"""Child sessions in real workers: ``ctx.spawn`` / ``ctx.join`` free the parent's slot,
failures are values, a cancel and an interrupt cascade, a spawn after the interrupt
committed is refused, limits refuse (kills at the spawn and join boundaries:
``test_children_kills.py``)."""

from __future__ import annotations

import json
import signal
from typing import Any
from uuid import UUID

import pytest

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.controls import ControlStore
from stint.store.pool import Pool
from stint.store.queries import numbered
from stint.store.vocabulary import ControlAction
from tests.interleaving import Interleaver
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
    assert report.passed, [c for c in report.as_json()["checks"] if not c["passed"]]


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


async def test_an_interrupt_of_the_parent_cascades_unless_abandoned(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    """Through ``stint interrupt``: a parent waiting in a join sees its children end
    ``interrupted`` (queued or waiting ones ended in the database, running ones by their
    worker, grandchildren too) and goes on; an abandoning parent's children run on."""
    client = ClientStore(db.config, pool)
    worker = cluster.start_worker(slots=4)
    forever = {"min_wait_ms": 0, "wait_for": "never"}
    inputs = {
        # Each child waits in a join of its own for a grandchild that waits for ever.
        "waiting": {"min_wait_ms": 0, "spawn": {"count": 1, "input": forever}},
        # Each child runs until a gate no one opens: a running turn, its slot held.
        "running": {"min_wait_ms": 0, "gate": "never"},
        "abandon": forever,
    }
    parents = {
        name: await _enqueue(
            client,
            name,
            {
                "min_wait_ms": 0,
                "spawn": {
                    "count": 2,
                    "input": child_input,
                    "on_cancel": "abandon" if name == "abandon" else "cascade",
                },
            },
        )
        for name, child_input in inputs.items()
    }

    async def all_wait() -> bool:
        for name, parent in parents.items():
            kids = await _children(pool, parent)
            if len(kids) != 2 or "wait.started" not in await event_kinds(pool, parent):
                return False
            if name == "running":
                if any(status != "running" for _, status in kids):
                    return False
                continue
            for kid, _ in kids:  # set aside in their own waits
                if "wait.started" not in await event_kinds(pool, kid):
                    return False
                if name == "waiting" and len(await _children(pool, kid)) != 1:
                    return False
        return True

    await wait_until(all_wait, what="every parent waits in its join, its children under way")
    outcomes = {}
    for name, parent in parents.items():
        result = cluster.stint("interrupt", str(parent))
        assert result.returncode == 0, result.stderr
        outcomes[name] = json.loads(result.stdout)["outcome"]
    assert outcomes == {
        "waiting": "no turn in progress; interrupted 4 child turn(s) (cascade)",
        "running": "no turn in progress; interrupted 2 child turn(s) (cascade)",
        "abandon": "no turn in progress",
    }
    for name in ("waiting", "running"):
        parent = parents[name]
        status, output, _ = await wait_until(
            lambda: _ended(pool, parent),  # noqa: B023 (awaited before the loop goes on)
            what=f"the {name} parent ends",
        )
        assert status == "succeeded"
        assert [end["status"] for end in output["children"]] == ["interrupted"] * 2
    for kid, _ in await _children(pool, parents["waiting"]):
        assert [s for _, s in await _children(pool, kid)] == ["interrupted"]
    assert [s for _, s in await _children(pool, parents["abandon"])] == ["queued"] * 2
    assert await _ended(pool, parents["abandon"]) is None  # still waiting for them
    for waiting in [kid for kid, _ in await _children(pool, parents["abandon"])]:
        assert cluster.stint("cancel", str(waiting)).returncode == 0
    assert cluster.stint("cancel", str(parents["abandon"])).returncode == 0
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    await _checks(pool, cluster)


@pytest.mark.parametrize("one_by_one", [False, True], ids=["spawn_many", "spawn"])
async def test_a_spawn_after_the_interrupt_committed_leaves_no_orphan(
    cluster: Cluster, db: ScratchTarget, pool: Pool, one_by_one: bool
) -> None:
    """The interrupt of a running parent holds its row (its cascade read found no
    child: none yet) while the parent's harness, past its gate, sends its spawn, which
    waits for that row; the interrupt commits. The spawn is refused (its children would
    be reached by nobody) and the parent's turn ends ``interrupted`` at once, with no
    child, its slot and lease freed."""
    client = ClientStore(db.config, pool)
    lease = 10.0  # the row is held a moment: no renewal may fall behind meanwhile
    worker = cluster.start_worker(slots=2, lease_seconds=lease)
    forever = {"min_wait_ms": 0, "wait_for": "never"}
    spawn = {"count": 2, "input": forever, "one_by_one": one_by_one}
    parent = await _enqueue(client, "p", {"min_wait_ms": 0, "gate": "spawn", "spawn": spawn})

    async def at_the_gate() -> bool:  # its effect done: the harness polls its gate
        return "tool.returned" in await event_kinds(pool, parent)

    await wait_until(at_the_gate, what="the parent's harness waits at its gate")
    interleaver = Interleaver(db, pool)
    try:
        actor = await interleaver.actor("client", pause=lambda name: name == "controls_request")
        interrupting = actor.start(
            ControlStore(db.config, actor.pool).control(
                session_id=parent, action=ControlAction.INTERRUPT, reason="stop"
            )
        )
        await interleaver.until_waiting(actor, "controls_request")  # the parent's row held
        cluster.open_gate("spawn")

        async def spawn_waits() -> bool:
            """A worker's spawn statement (its text's opening: the activity view keeps
            only the first KiB) waits for a lock the interrupt's backend holds."""
            rows = await fetch(
                pool,
                "SELECT count(*) FROM pg_stat_activity w "
                "JOIN pg_stat_activity b ON b.pid = ANY (pg_blocking_pids(w.pid)) "
                "WHERE b.application_name = %s AND left(w.query, 200) = ANY (%s)",
                actor.application_name,
                [numbered(name).text[:200] for name in ("children_spawn", "children_spawn_many")],
            )
            return bool(rows[0][0])

        await wait_until(spawn_waits, what="the parent's spawn waits for its row")
        actor.go()
        result = await interrupting
    finally:
        await interleaver.close()
    assert result.outcome.startswith("requested from worker")  # no child to cascade to
    status, _, _ = await wait_until(lambda: _ended(pool, parent), what="the parent ends")
    assert status == "interrupted"
    assert await _children(pool, parent) == []
    assert await _spawn_steps(pool, parent) == []
    assert await fetch(pool, "SELECT count(*) FROM sessions WHERE parent_id IS NOT NULL") == [(0,)]
    kinds = await event_kinds(pool, parent)
    assert "child.started" not in kinds and "turn.released" not in kinds
    assert kinds[-2:] == ["control.requested", "turn.interrupted"]
    [(took, owner)] = await fetch(
        pool,
        "SELECT (SELECT max(created_at) FROM events WHERE session_id = s.id) "
        "     - (SELECT created_at FROM events WHERE session_id = s.id "
        "        AND kind = 'control.requested'), s.lease_owner "
        "FROM sessions s WHERE s.id = %s",
        parent,
    )
    assert owner is None and took.total_seconds() < lease / 2  # not left to the lease
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    await _checks(pool, cluster)


async def test_a_child_past_the_tenants_session_limit_is_refused(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    result = cluster.stint("admission", "set", "--tenant", "acme", "--max-sessions", "2")
    assert result.returncode == 0, result.stderr
    worker = cluster.start_worker(slots=2)
    queued = await client.turns_enqueue(
        session_id=None,
        idempotency_key="p",
        turn_input={
            "min_wait_ms": 0,
            "spawn": {"count": 2, "input": {"min_wait_ms": 0}, "one_by_one": True},
        },
        tenant="acme",
    )
    status, _, error = await wait_until(
        lambda: _ended(pool, queued.session_id), what="the parent ends"
    )
    assert status == "failed" and error is not None
    assert error.startswith(
        "ChildRefused: child refused: max_sessions limit of 2 sessions reached for tenant acme"
    )
    assert len(await _children(pool, queued.session_id)) == 1  # the second wrote nothing
    assert await fetch(pool, "SELECT count(*) FROM sessions WHERE tenant = 'acme'") == [(2,)]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    await _checks(pool, cluster)


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
