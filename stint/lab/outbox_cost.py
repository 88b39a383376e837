"""``python -m stint.lab.outbox_cost``: what the webhook outbox adds to an event append.

On a throwaway database, one leased session of tenant ``acme`` appends one event at a
time through ``events_append`` (the ``log_append`` fragment, as every event writer
does) under ``EXPLAIN (ANALYZE)``, ``--runs`` times in each of three cases: no webhook
endpoint in the deployment, an endpoint of another tenant only, and an endpoint of
``acme`` for the event's kind (one delivery written per event). Prints the median
and 90th percentile execution time of the statement and of its ``log_outbox`` part,
from PostgreSQL's own timing. A figure for a report, not a test.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
from typing import Any

import uvloop
from psycopg import sql

from stint.postgres.scratch import ScratchDatabases
from stint.postgres.throwaway import ThrowawayTemplate
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.pool import open_pool
from stint.store.queries import query
from stint.store.sealed import WebhookKey
from stint.store.webhooks import WebhookStore, check_endpoint
from stint.store.worker_store import SqlWorkerStore

__all__ = ["main"]


def _outbox_ms(node: dict[str, Any]) -> float | None:
    if node.get("Subplan Name") == "CTE log_outbox":
        return float(node["Actual Total Time"])
    for child in node.get("Plans", []):
        found = _outbox_ms(child)
        if found is not None:
            return found
    return None


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(ordered[len(ordered) // 2], 4),
        "p90_ms": round(ordered[int(len(ordered) * 0.9)], 4),
    }


async def run(runs: int) -> list[dict[str, Any]]:
    template = ThrowawayTemplate()
    cluster = template.new_cluster()
    results = []
    try:
        scratch = ScratchDatabases(StoreConfig(conninfo=cluster.conninfo()))
        await scratch.prepare()
        target = await scratch.create()
        config = target.config
        pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=2)
        try:
            await ClientStore(config, pool).turns_enqueue(
                session_id=None, idempotency_key="k", turn_input={}, tenant="acme"
            )
            runtime = SqlWorkerStore(config, pool, concurrency=1)
            [work] = await runtime.turns_claim(owner="w", pins=[], limit=1, lease_seconds=3600)
            assert work.turn is not None
            params = {
                "session_id": work.claim.session_id,
                "turn_id": work.turn.turn_id,
                "owner": "w",
                "epoch": work.claim.epoch,
                "kinds": ["message"],
                "payloads": [json.dumps({"n": 1})],
                "events_channel": config.events_channel,
            }
            explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + sql.SQL(query("events_append"))
            key = WebhookKey(base64.b64encode(os.urandom(32)).decode())
            for case, tenant in (
                ("no endpoint", None),
                ("another tenant's endpoint", "other"),
                ("the tenant's endpoint", "acme"),
            ):
                if tenant is not None:
                    endpoint = check_endpoint(
                        tenant=tenant,
                        url="https://e.example/h",
                        kinds=["message"],
                        description=None,
                    )
                    await WebhookStore(config, pool).create(endpoint, key=key)
                statement: list[float] = []
                outbox: list[float] = []
                async with pool.connection() as conn:
                    for _ in range(runs):
                        cur = await conn.execute(explain, params)
                        row = await cur.fetchone()
                        assert row is not None
                        plan = row[0][0]
                        statement.append(float(plan["Execution Time"]))
                        outbox.append(_outbox_ms(plan["Plan"]) or 0.0)
                results.append(
                    {
                        "case": case,
                        "statement": _quantiles(statement),
                        "log_outbox": _quantiles(outbox),
                    }
                )
                print(json.dumps(results[-1]), flush=True)
        finally:
            await pool.close()
    finally:
        cluster.destroy()
        template.cleanup()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stint.lab.outbox_cost")
    parser.add_argument("--runs", type=int, default=500, help="appends measured per case")
    args = parser.parse_args(argv)
    uvloop.run(run(args.runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
