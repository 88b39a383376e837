"""Enqueues per second, one transaction per turn and in batches, as figures.

``python -m stint.lab.enqueue_rate``: a fresh durable throwaway PostgreSQL (fsync
on, as deployed); one producer queues ``--turns`` turns, each on a new session
(a job), first one ``turns_enqueue`` at a time (each its own transaction and
commit), then with ``turns_enqueue_many`` in batches of ``--batch``; each
phase on its own fresh database. Prints one JSON line per phase with the
statements each turn cost (pg_stat_statements: BEGIN and COMMIT count too; over
a socket each is a round trip unless pipelined).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import uvloop

from stint.postgres.scratch import ScratchDatabases
from stint.postgres.throwaway import ThrowawayTemplate
from stint.store.client import ClientStore, EnqueueItem
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.pool import open_pool
from stint.store.probe import ProbeStore

__all__ = ["main"]


def _item(n: int) -> EnqueueItem:
    key = f"job-{n}-{uuid.uuid4()}"
    return EnqueueItem(idempotency_key=key, turn_input={"n": n}, session_key=key)


async def _single(client: ClientStore, turns: int, batch: int) -> None:
    for n in range(turns):
        item = _item(n)
        await client.turns_enqueue(
            session_id=None,
            idempotency_key=item.idempotency_key,
            turn_input=item.turn_input,
            session_key=item.session_key,
        )


async def _batched(client: ClientStore, turns: int, batch: int) -> None:
    for start in range(0, turns, batch):
        await client.turns_enqueue_many([_item(n) for n in range(start, min(turns, start + batch))])


_PHASES: dict[str, Callable[[ClientStore, int, int], Awaitable[None]]] = {
    "single": _single,
    "batched": _batched,
}


async def _run(turns: int, batch: int) -> list[dict[str, object]]:
    template = ThrowawayTemplate(
        durable=True, settings={"shared_preload_libraries": "pg_stat_statements"}
    )
    lines: list[dict[str, object]] = []
    try:
        cluster = template.new_cluster()
        try:
            scratch = ScratchDatabases(StoreConfig(conninfo=cluster.conninfo()))
            await scratch.prepare()
            for phase, run in _PHASES.items():
                target = await scratch.create()
                pool = await open_pool(target.config, ROLE_CLI, min_size=1, max_size=2)
                try:
                    probe = ProbeStore(target.config, pool)
                    await probe.statements_reset()
                    began = time.perf_counter()
                    await run(ClientStore(target.config, pool), turns, batch)
                    seconds = time.perf_counter() - began
                    statements = await probe.statements_calls(excluding=["statements_all"])
                finally:
                    await pool.close()
                lines.append(
                    {
                        "phase": phase,
                        "turns": turns,
                        "batch": batch if phase == "batched" else 1,
                        "seconds": round(seconds, 3),
                        "enqueues_per_second": round(turns / seconds),
                        "statements_per_turn": round(statements / turns, 2),
                    }
                )
                print(json.dumps(lines[-1]), flush=True)
        finally:
            cluster.destroy()
    finally:
        template.cleanup()
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stint.lab.enqueue_rate", description=__doc__)
    parser.add_argument("--turns", type=int, default=5000, help="turns per phase (5000)")
    parser.add_argument("--batch", type=int, default=1000, help="turns per batch (1000)")
    args = parser.parse_args(argv)
    uvloop.run(_run(args.turns, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
