"""``docs/reliability.md``: the fault suite and the soak's figures, with their commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stint.loadtest.environment import DOCS

__all__ = ["write_reliability"]


_FAULT_SUITE = Path(__file__).with_name("fault_suite.md")


def write_reliability(figures: dict[str, Any], *, command: str, generated_at: str) -> Path:
    """Write the soak's JSON and regenerate ``docs/reliability.md`` around it."""
    DOCS.mkdir(exist_ok=True)
    (DOCS / "reliability-soak.json").write_text(
        json.dumps({"generated_at": generated_at, "command": command, **figures}, indent=2) + "\n"
    )
    recovery = " / ".join(_s(figures[f"recovery_{k}_s"]) for k in ("p50", "p99", "max"))
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(figures["faults_by_kind"].items()))
    soak = f"""## The soak

`{command}` ({generated_at}; seed {figures["seed"]}): {figures["sessions"]} sessions and
{figures["turns"]} turns arriving over the run, 3 workers x 4 slots behind TCP proxies, a
durable throwaway PostgreSQL, a fault every 4-8 s.

| figure | value |
| --- | --- |
| duration | {figures["duration_s"]} s |
| faults injected | {figures["faults_injected"]} ({kinds}) |
| recoveries measured | {figures["recoveries_measured"]} |
| recovery p50 / p99 / max | {recovery} |
| turns by status | {json.dumps(figures["turns_by_status"])} |
| lost turns | {figures["lost_turns"]} |
| duplicated effects | {figures["duplicated_effects"]} |
| all checkers passed | {figures["checks_passed"]} |

Recovery is measured per fault: for a worker fault (kill -9, SIGSTOP, proxy blackhole, reset,
delay) until every lease the victim held has a new epoch (taken over or given back); for a
PostgreSQL restart until a turn finishes again.
The full record: [reliability-soak.json](reliability-soak.json).
"""
    path = DOCS / "reliability.md"
    path.write_text(f"# Reliability\n\n{_FAULT_SUITE.read_text()}\n{soak}")
    return path


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"
