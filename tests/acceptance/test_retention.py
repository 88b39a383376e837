"""Retention with real worker processes: an elected worker prunes on its
schedule while turns run, and every invariant still holds afterwards."""

from __future__ import annotations

import json
import signal

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, count_rows, fetch

# 0.00002 days is 1.7 seconds: history that old is pruned.
SHORT = {
    "retain_events_days": "0.00002",
    "retain_turns_days": "0.00002",
    "prune_interval": "0.5",
}


async def test_workers_prune_old_history_on_their_schedule(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    workers = [cluster.start_worker(slots=2, **SHORT) for _ in range(2)]
    sessions = set()
    for i in range(6):
        queued = json.loads(cluster.stint("enqueue", '{"min_wait_ms": 0}').stdout)
        sessions.add(queued["session_id"])
        cluster.stint("enqueue", "--session", queued["session_id"], f'{{"n": {i}}}')

    async def all_pruned() -> bool:
        return await count_rows(pool, "turns") == 0 and not cluster.journal_sessions()

    await wait_until(all_pruned, what="every turn and journal pruned", within=60)
    heads = await fetch(
        pool, "SELECT last_event_seq, events_pruned_through, turns_pruned FROM sessions"
    )
    assert len(heads) == 6 and all(last == head and pruned == 2 for last, head, pruned in heads)
    assert await count_rows(pool, "events") == 0 and await count_rows(pool, "steps") == 0
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    assert sum("pruned:" in w.log_text() for w in workers) >= 1
    report = await run_checks(pool, journals=cluster.workspace / "journals")
    assert report.passed, [c for c in report.checks if not c.passed]


async def test_stint_prune_runs_now_and_says_what_it_removed(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    worker = cluster.start_worker(slots=2, prune_interval="0")
    done = json.loads(cluster.stint("enqueue", '{"min_wait_ms": 0}').stdout)

    async def finished() -> bool:
        rows = await fetch(pool, "SELECT status FROM turns WHERE id = %s", done["turn_id"])
        return rows == [("succeeded",)]

    await wait_until(finished, what="the turn finished")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    kept = json.loads(cluster.stint("prune").stdout)
    assert (kept["database"], kept["turns"]) == (True, 0)  # nothing is 30 days old
    pruned = json.loads(
        cluster.stint(
            "prune", STINT_RETAIN_TURNS_DAYS="0.0000001", STINT_RETAIN_EVENTS_DAYS="0.0000001"
        ).stdout
    )
    assert (pruned["turns"], pruned["steps"], pruned["events"], pruned["journals"]) == (1, 1, 4, 1)
    assert await count_rows(pool, "turns") == 0
    # The session is idle with no turn left: it goes with its own horizon, not before.
    assert pruned["sessions"] == 0 and await count_rows(pool, "sessions") == 1
    gone = json.loads(cluster.stint("prune", STINT_RETAIN_IDLE_SESSIONS_DAYS="0.0000001").stdout)
    assert gone["sessions"] == 1 and await count_rows(pool, "sessions") == 0
