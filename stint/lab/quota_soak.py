"""The quota soak: a backlog of turns through provider quotas, fast fake provider.

Workers run the agents harness (one model call a turn) against a fake
OpenAI-compatible server of their own, half of them counting against one
quota scope and half against another, each scope's limits set so that they
bind: turns wait in place or are handed back with a not-before time, many
times over. The run reports turns per second, the waits (in place, and the
not-before distance of each hand-back), each scope's books with the
provider's own count beside them, and the workers' RSS growth.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import psutil

from stint.lab.processes import spawn_worker, stop_workers
from stint.lab.runner import WORKER_SETTINGS
from stint.ops.quota_cli import quota_json
from stint.ops.stats import percentile
from stint.store.probe import ProbeStore
from stint.store.quotas import QuotaLimits, QuotaStore

__all__ = ["QuotaPlan", "QuotaRun", "QuotaSoak"]

_SAMPLE_SECONDS = 0.5
_SCRIPT = [{"when": "", "reply": "ok"}]  # one model call a turn, no tool
_MESSAGE = "Count this request against the quota, please."


@dataclass(frozen=True)
class QuotaPlan:
    """The run's shape. Limits are per scope per window; the window is short so
    a run of minutes crosses it hundreds of times. Each request is estimated at
    about 420 tokens (its JSON / 3 + 16 output) and costs about 20 as the fake
    counts: the tpm binds on requests in flight, the rpm on the rate."""

    turns: int = 100_000
    workers: int = 4
    slots: int = 16
    scopes: int = 2
    window_seconds: float = 1.0
    rpm: int = 15
    tpm: int = 4_000
    wait_in_place: float = 0.2
    warmup_share: float = 0.1  # RSS growth is measured from this share of the turns done


@dataclass
class QuotaRun:
    plan: QuotaPlan
    seconds: float = 0.0
    rss_mib_after_warmup: list[float] = field(default_factory=list)
    rss_mib_at_end: list[float] = field(default_factory=list)
    scopes: list[dict[str, Any]] = field(default_factory=list)
    provider: dict[str, dict[str, int]] = field(default_factory=dict)
    waits_in_place: list[float] = field(default_factory=list)
    deferral_waits: list[float] = field(default_factory=list)
    # Per API key, the busiest window by arrival time at the provider's door.
    busiest: dict[str, dict[str, int]] = field(default_factory=dict)

    def within_limits(self) -> bool:
        """No scope's busiest window at the provider held more than it allows."""
        return all(
            (b := self.busiest.get(scope["key"])) is not None
            and b["requests"] <= self.plan.rpm
            and b["tokens"] <= self.plan.tpm
            for scope in self.scopes
        )

    @property
    def items_per_second(self) -> float | None:
        return round(self.plan.turns / self.seconds, 1) if self.seconds else None

    def books_exact(self) -> bool:
        """Every scope at rest balances, and counted every request the provider saw."""
        for scope in self.scopes:
            requests, tokens = scope["requests"], scope["tokens"]
            seen = self.provider.get(scope["key"], {})
            if requests["in_flight"] or tokens["in_flight"]:
                return False
            if tokens["reserved"] != (
                tokens["reconciled"] + tokens["refunded"] - tokens["debt"] + tokens["unknown"]
            ):
                return False
            if requests["reserved"] != sum(seen.get(k, 0) for k in ("ok", "dropped", "status")):
                return False
            if tokens["reconciled"] != seen.get("tokens", 0):
                return False
        return True

    def as_json(self) -> dict[str, Any]:
        growth = [
            round(end - start, 1)
            for start, end in zip(self.rss_mib_after_warmup, self.rss_mib_at_end, strict=False)
        ]
        return {
            "plan": asdict(self.plan),
            "seconds": round(self.seconds, 2),
            "items_per_second": self.items_per_second,
            "waits_in_place_s": _spread(self.waits_in_place),
            "deferral_not_before_s": _spread(self.deferral_waits),
            "scopes": self.scopes,
            "provider_counts": self.provider,
            "books_exact": self.books_exact(),
            "provider_busiest_window": self.busiest,
            "within_limits_at_the_provider": self.within_limits(),
            "worker_rss_mib": {
                "after_warmup": self.rss_mib_after_warmup,
                "at_end": self.rss_mib_at_end,
                "growth": growth,
            },
        }


def _spread(values: list[float]) -> dict[str, Any]:
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values, default=None),
    }


class QuotaSoak:
    """Runs the plan against one migrated database; ``run`` returns the figures."""

    def __init__(
        self,
        plan: QuotaPlan,
        *,
        probe: ProbeStore,
        quotas: QuotaStore,
        env: dict[str, str],
        workdir: Path,
        cgroup_procs: list[Path],
        progress: Callable[[str], None],
    ) -> None:
        self.plan = plan
        self.probe = probe
        self.quotas = quotas
        self.env = {**WORKER_SETTINGS, **env}
        self.workdir = workdir
        self.cgroup_procs = cgroup_procs
        self.progress = progress

    def _keys(self) -> dict[str, str]:
        return {f"scope-{n}": f"sk-load-{n}-000000000000" for n in range(self.plan.scopes)}

    async def run(self) -> QuotaRun:
        plan, result = self.plan, QuotaRun(self.plan)
        keys = self._keys()
        for scope in keys:
            await self.quotas.quota_set(
                scope, QuotaLimits(rpm=plan.rpm, tpm=plan.tpm, window_seconds=plan.window_seconds)
            )
        seeded = await self.probe.sessions_seed_ready(plan.turns, {"message": _MESSAGE})
        self.progress(f"{seeded} turns queued")
        with self._fake() as url:
            procs = [
                spawn_worker(
                    env={**self.env, **self._worker_env(url, scope, key)},
                    args=["--slots", str(plan.slots)],
                    log_path=self.workdir / f"worker{i}.log",
                    cgroup_procs=self.cgroup_procs,
                )
                for i, (scope, key) in enumerate(
                    (list(keys.items()) * plan.workers)[: plan.workers]
                )
            ]
            try:
                started = time.monotonic()
                await self._watch(result, procs)
                result.seconds = time.monotonic() - started
            finally:
                stop_workers(procs)
            result.provider = await asyncio.to_thread(_counts, url)
            result.busiest = await asyncio.to_thread(_busiest, url, plan.window_seconds)
        books = {q.scope: quota_json(q) for q in await self.quotas.quota_list()}
        result.scopes = [{**books[scope], "key": key} for scope, key in keys.items()]
        result.waits_in_place, result.deferral_waits = await self.probe.quota_waits()
        return result

    def _worker_env(self, url: str, scope: str, key: str) -> dict[str, str]:
        return {
            "STINT_HARNESS": "stint.agents:chat",
            "STINT_MODEL_BASE_URL": url,
            "STINT_MODEL": "fake-model",
            "STINT_MODEL_API_KEY": key,
            "STINT_MODEL_QUOTA_SCOPE": scope,
            "STINT_QUOTA_WAIT_IN_PLACE": str(self.plan.wait_in_place),
            "STINT_QUOTA_OUTPUT_TOKENS": "16",
            "STINT_AGENT_SYSTEM_PROMPT": "",
            "STINT_AGENT_HISTORY_MESSAGES": "0",
            # A session handed back is claimable again at its not-before time:
            # a short poll finds it then (no notification announces it).
            "STINT_POLL_INTERVAL": "0.05",
        }

    @contextlib.contextmanager
    def _fake(self) -> Any:
        """The fake provider in a process of its own (no token delay)."""
        script = self.workdir / "script.json"
        script.write_text(json.dumps(_SCRIPT))
        proc = subprocess.Popen(
            [
                sys.executable,
                *("-m", "stint.lab.fake_provider", "--port", "0"),
                *("--token-delay-ms", "0", "--script", str(script)),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            yield line.strip().rsplit("=", 1)[1]
        finally:
            proc.terminate()
            proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()

    async def _watch(self, result: QuotaRun, procs: list[subprocess.Popen[bytes]]) -> None:
        warm = int(self.plan.turns * self.plan.warmup_share)
        last = -1
        while True:
            await asyncio.sleep(_SAMPLE_SECONDS)
            dead = [p.pid for p in procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"worker(s) {dead} exited during the quota soak")
            finished = (await self.probe.turns_progress()).finished
            if not result.rss_mib_after_warmup and finished >= warm:
                result.rss_mib_after_warmup = _rss(procs)
            if finished // 10_000 != last // 10_000:
                self.progress(f"{finished}/{self.plan.turns} turns")
            last = finished
            if finished >= self.plan.turns:
                result.rss_mib_at_end = _rss(procs)
                return


def _counts(url: str) -> dict[str, dict[str, int]]:
    """The fake provider's own tally of what it was asked, per API key."""
    with urlopen(f"{url}/_fake/counts", timeout=30) as answer:
        counts: dict[str, dict[str, int]] = json.loads(answer.read())
    return counts


def _busiest(url: str, window: float) -> dict[str, dict[str, int]]:
    """The fake provider's busiest window per API key, by arrival time."""
    with urlopen(f"{url}/_fake/busiest?window={window}", timeout=60) as answer:
        busiest: dict[str, dict[str, int]] = json.loads(answer.read())
    return busiest


def _rss(procs: list[subprocess.Popen[bytes]]) -> list[float]:
    found = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            found.append(round(psutil.Process(proc.pid).memory_info().rss / 2**20, 1))
    return found
