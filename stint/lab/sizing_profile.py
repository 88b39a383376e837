"""The ``sizing`` section of ``matrix.json``: what ``stint size`` reads.

Per harness: every measured configuration's costs (ranges over its reps), and
the ranges ``stint size`` computes with: each cost over every configuration
that passed its checks, so the answer rests on the whole matrix and on no
single cell's luck; memory as a worker's base plus a cost per slot (a
least-squares line through the configurations' peaks); and which cells found
the machine CPU-bound, whose throughput says how this machine ran out of CPU,
not what a turn costs. The report generation is the source of truth: a re-run
of the matrix rewrites this section, and ``stint size`` follows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stint.lab.fit import least_squares_slope

__all__ = ["PROFILE_SCHEMA_VERSION", "RANGED_COSTS", "sizing_profile"]

PROFILE_SCHEMA_VERSION = 2
RANGED_COSTS = (
    "worker_cpu_ms_per_turn",
    "pg_cpu_ms_per_turn",
    "idle_worker_cpu_ms_per_s",
    "idle_pg_cpu_ms_per_s",
    "busy_worker_cpu_ms_per_s",
    "wait_worker_cpu_ms_per_slot_s",
)
"""The costs of ``model.Costs`` that size a deployment, each a [min, max] range."""
_SCRIPTED = "scripted"
_X = "\N{MULTIPLICATION SIGN}"

Span = list[float] | None


def _span(spans: Iterable[Span]) -> Span:
    """The range that covers every given range; None when none was measured."""
    found = [s for s in spans if s is not None]
    if not found:
        return None
    return [min(s[0] for s in found), max(s[1] for s in found)]


def _describe(row: dict[str, Any]) -> str:
    if row["harness"] == "agents":
        wait = f"2 {_X} {row['model_latency_ms']} ms model calls"
    else:
        wait = f"{row['tool_wait_ms']} ms tool wait"
    return f"{row['workers']} {_X} {row['slots']}, {row['sessions']} sessions, {wait}"


def _configuration(row: dict[str, Any]) -> dict[str, Any]:
    costs = row.get("costs") or {}
    warm = row["warm"]
    return {
        "configuration": _describe(row),
        "workers": row["workers"],
        "slots": row["slots"],
        "sessions": row["sessions"],
        "reps": row["reps"],
        "all_checks_passed": row["all_checks_passed"],
        **{key: costs.get(key) for key in RANGED_COSTS},
        "peak_rss_mib_per_worker": row.get("peak_rss_mib_per_worker"),
        "db_connections_per_worker": row.get("db_connections_per_worker"),
        "claim_p95_ms": warm.get("claim_p95_ms"),
        "handoff_p95_ms": warm.get("handoff_p95_ms"),
        "idle_drain_s": row.get("idle_drain_s"),
        "warm_fraction_of_limit": warm.get("fraction_of_limit"),
        "host_cpu_busy": costs.get("host_cpu_busy"),
        "cpu_bound_reps": costs.get("cpu_bound_reps", 0),
        "load_average_1m": costs.get("load_average_1m"),
    }


def _memory(
    configurations: list[dict[str, Any]], borrowed: list[float] | None
) -> dict[str, Any] | None:
    """A worker's peak RSS as base + slots x per-slot: a line through the lows of each
    configuration and one through the highs give the per-slot range; the base range
    covers every configuration's peaks under the mean slope. With one slot count
    measured the per-slot range is ``borrowed`` (the scripted fixture's)."""
    measured = [c for c in configurations if c["peak_rss_mib_per_worker"] is not None]
    if not measured:
        return None
    slopes = [
        least_squares_slope([(c["slots"], c["peak_rss_mib_per_worker"][end]) for c in measured])
        for end in (0, 1)
    ]
    fitted = [max(0.0, s) for s in slopes if s is not None]
    per_slot = [min(fitted), max(fitted)] if len(fitted) == 2 else borrowed
    if per_slot is None:
        return None
    mean = (per_slot[0] + per_slot[1]) / 2
    lows = [c["peak_rss_mib_per_worker"][0] - mean * c["slots"] for c in measured]
    highs = [c["peak_rss_mib_per_worker"][1] - mean * c["slots"] for c in measured]
    return {
        "rss_mib_base": [round(min(lows), 2), round(max(highs), 2)],
        "rss_mib_per_slot": [round(per_slot[0], 4), round(per_slot[1], 4)],
        "per_slot_from": "fit" if len(fitted) == 2 else "the scripted fixture's fit",
        "slots_measured": sorted({c["slots"] for c in measured}),
    }


def _harness(rows: list[dict[str, Any]], borrowed: list[float] | None) -> dict[str, Any]:
    configurations = [_configuration(row) for row in rows]
    passed = [c for c in configurations if c["all_checks_passed"]]
    return {
        "configurations": configurations,
        "costs": {
            **{key: _span(c[key] for c in passed) for key in RANGED_COSTS},
            "db_connections_per_worker": _span(c["db_connections_per_worker"] for c in passed),
            "claim_p95_ms": _span(c["claim_p95_ms"] for c in passed),
            "handoff_p95_ms": _span(c["handoff_p95_ms"] for c in passed),
        },
        "memory": _memory(passed, borrowed),
        "max_slots_measured": max((c["slots"] for c in passed), default=None),
        "configurations_used": len(passed),
        "configurations_failed": [c["configuration"] for c in configurations if c not in passed],
        "cpu_bound": [
            {
                "configuration": c["configuration"],
                "reps": c["cpu_bound_reps"],
                "of": c["reps"],
                "host_cpu_busy": c["host_cpu_busy"],
            }
            for c in configurations
            if c["cpu_bound_reps"]
        ],
    }


def sizing_profile(
    summary: list[dict[str, Any]], *, environment: dict[str, Any], backend: dict[str, Any]
) -> dict[str, Any]:
    """The profile of a matrix's summary rows, per harness (scripted first)."""
    by_harness: dict[str, list[dict[str, Any]]] = {}
    for row in summary:
        by_harness.setdefault(str(row["harness"]), []).append(row)
    harnesses: dict[str, Any] = {}
    borrowed = None
    for name in sorted(by_harness, key=lambda h: h != _SCRIPTED):
        harnesses[name] = _harness(by_harness[name], borrowed)
        if name == _SCRIPTED and harnesses[name]["memory"]:
            borrowed = harnesses[name]["memory"]["rss_mib_per_slot"]
    return {
        "schema_version": PROFILE_SCHEMA_VERSION,
        "machine": {
            "cpus": environment.get("cpus"),
            "backend": backend.get("kind"),
            "postgres_limits": backend.get("postgres_limits"),
            "worker_limits": backend.get("worker_limits"),
        },
        "harnesses": harnesses,
    }
