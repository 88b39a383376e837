"""``python -m stint.lab.webhook_latency``: turn latency with and without webhooks.

The same paced workload (turns arriving at a fixed rate, each on a new session of
one tenant) through one real worker, three times on fresh databases: with no
endpoint; with an endpoint for ``turn.started`` and ``turn.completed`` whose
receiver answers 200 after a delay; with one whose receiver always fails (500),
so every delivery is retried as fast as the settings allow. Figures from database
timestamps: each turn's latency (enqueued to finished), and in the second run each
delivery's lag (event appended to delivered). Writes ``docs/load/webhooks.json``.
A figure for a report, not a test: the point is that delivery never slows a turn.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import statistics
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import uvloop

from stint.lab.environment import DOCS
from stint.lab.processes import spawn_worker, stop_workers
from stint.lab.webhook_receiver import Receiver
from stint.postgres.scratch import ScratchDatabases, ScratchTarget
from stint.postgres.throwaway import ThrowawayTemplate
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.pool import open_pool
from stint.store.probe import ProbeStore
from stint.store.sealed import WebhookKey
from stint.store.webhook_probe import WebhookProbe
from stint.store.webhooks import WebhookStore, check_endpoint

__all__ = ["main"]

SCHEMA_VERSION = 1
_KINDS = ["turn.started", "turn.completed"]


@dataclass(frozen=True)
class Phase:
    name: str
    turns: int
    turn_p50_ms: float
    turn_p95_ms: float
    turn_p99_ms: float
    turn_max_ms: float
    deliveries: int
    delivered: int
    delivery_lag_p50_ms: float | None
    delivery_lag_p95_ms: float | None
    receiver_requests: int


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


async def _phase(
    target: ScratchTarget, name: str, status: int | None, args: argparse.Namespace
) -> Phase:
    config = target.config
    key = base64.b64encode(os.urandom(32)).decode()
    delay = args.receiver_ms / 1000
    receiver = await Receiver(script=lambda _id, _seen: (status or 200, delay)).start()
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=4)
    workspace = Path(tempfile.mkdtemp(prefix="stint-webhook-latency-"))
    proc = None
    try:
        if status is not None:
            endpoint = check_endpoint(
                tenant="acme", url=receiver.url, kinds=_KINDS, description=None
            )
            _, receiver.secret = await WebhookStore(config, pool).create(
                endpoint, key=WebhookKey(key)
            )
        env = {
            "STINT_DATABASE_URL": config.conninfo,
            "STINT_SCHEMA": config.schema,
            "STINT_WORKSPACE": str(workspace),
            "STINT_LOG_LEVEL": "warning",
            "STINT_AUTO_MIGRATE": "false",
            "STINT_WEBHOOK_KEY": key,
            "STINT_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
            "STINT_WEBHOOK_POLL_SECONDS": "0.1",
            "STINT_WEBHOOK_RETRY_SECONDS": "0.05",
            "STINT_WEBHOOK_RETRY_MAX_SECONDS": "0.2",
            "STINT_WEBHOOK_MAX_ATTEMPTS": "100",
        }
        proc = spawn_worker(env=env, args=["--slots", str(args.slots)])
        probe = ProbeStore(config, pool)
        figures = WebhookProbe(config, pool)
        while await probe.workers_running() < 1:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        client = ClientStore(config, pool)
        for n in range(args.turns):
            await client.turns_enqueue(
                session_id=None,
                idempotency_key=f"t{n}",
                turn_input={"min_wait_ms": args.turn_ms},
                tenant="acme",
                session_key=f"t{n}",
            )
            await asyncio.sleep(1 / args.rate)
        while (await probe.turns_progress()).finished < args.turns:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        if status == 200:  # the lag figure needs every delivery through
            while set(await figures.deliveries_by_status()) - {"delivered"}:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        latency = await figures.turn_latencies()
        lag = await figures.delivery_lags()
        deliveries = sum((await figures.deliveries_by_status()).values())
    finally:
        if proc is not None:
            stop_workers([proc])
        await pool.close()
        await receiver.stop()
    return Phase(
        name=name,
        turns=len(latency),
        turn_p50_ms=round(statistics.median(latency) * 1000, 1),
        turn_p95_ms=_ms(latency, 0.95),
        turn_p99_ms=_ms(latency, 0.99),
        turn_max_ms=round(max(latency) * 1000, 1),
        deliveries=deliveries,
        delivered=len(lag),
        delivery_lag_p50_ms=round(statistics.median(lag) * 1000, 1) if lag else None,
        delivery_lag_p95_ms=_ms(lag, 0.95) if lag else None,
        receiver_requests=len(receiver.requests),
    )


async def run(args: argparse.Namespace) -> list[Phase]:
    template = ThrowawayTemplate()
    phases = []
    try:
        cluster = template.new_cluster()
        try:
            scratch = ScratchDatabases(StoreConfig(conninfo=cluster.conninfo()))
            await scratch.prepare()
            for name, status in (
                ("no webhooks", None),
                ("receiver ok", 200),
                ("receiver 500", 500),
            ):
                target = await scratch.create()
                phase = await _phase(target, name, status, args)
                print(json.dumps(asdict(phase)), flush=True)
                phases.append(phase)
        finally:
            cluster.destroy()
    finally:
        template.cleanup()
    return phases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stint.lab.webhook_latency")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rate", type=float, default=20.0, help="turns enqueued per second")
    parser.add_argument("--turn-ms", type=int, default=50, help="each turn's scripted wait")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--receiver-ms", type=int, default=20, help="the receiver's delay")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    phases = uvloop.run(run(args))
    if not args.no_write:
        report = {
            "schema_version": SCHEMA_VERSION,
            "generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": "python -m stint.lab.webhook_latency " + " ".join(argv or []),
            "environment": {
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "loadavg": Path("/proc/loadavg").read_text().split()[:3],
            },
            "configuration": {k: v for k, v in vars(args).items() if k != "no_write"},
            "phases": [asdict(p) for p in phases],
        }
        (DOCS / "load" / "webhooks.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
