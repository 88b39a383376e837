"""The sizing validation's report: ``sizing.json`` and ``sizing.md``.

What ``stint size`` recommended for a workload, then each configuration run at
that workload (``stint.lab.sizing_run``): whether its queue held, and the
figures behind the verdict. Data first; the Markdown is rendered from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stint.lab.report_head import report_head
from stint.lab.sizing_run import ValidationRun

__all__ = ["SIZING_SCHEMA_VERSION", "render_sizing_report", "sizing_report", "write_sizing_report"]

SIZING_SCHEMA_VERSION = 1
_X = "\N{MULTIPLICATION SIGN}"
_DASH = "\N{EN DASH}"


def sizing_report(
    *,
    sizing: dict[str, Any],
    size_command: str,
    runs: list[ValidationRun],
    command: str,
    generated_at: str,
    load_average: dict[str, list[float]],
    backend: str,
    environment: dict[str, Any],
) -> dict[str, Any]:
    """``sizing.json``: the recommendation, and each configuration's run."""
    return {
        "schema_version": SIZING_SCHEMA_VERSION,
        "generated_at": generated_at,
        "command": command,
        "load_average": load_average,
        "backend": backend,
        "environment": environment,
        "stint_size": {"command": size_command, **sizing},
        "runs": [r.as_json() for r in runs],
    }


def _s(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3f} s"


def _list(values: list[Any], digits: int) -> str:
    shown = ["not measured" if v is None else f"{v:.{digits}f}" for v in values]
    return ", ".join(shown) if shown else "not measured"


def _row(run: dict[str, Any]) -> str:
    plan, age, busy = run["plan"], run["queue_age_s"], run["busy_slots"]
    thirds = " / ".join("-" if v is None else f"{v:.2f}" for v in run["queue_age_p95_by_third_s"])
    cells = [
        f"{plan['label']}: {plan['workers']} {_X} {plan['slots']}",
        f"{plan['total_slots']}",
        str(run["turns"]),
        _s(age.get("p50")),
        _s(age.get("p95")),
        _s(age.get("max")),
        thirds,
        f"{busy.get('mean')} / {busy.get('p95')} / {busy.get('max')}",
        _list(run["worker_cpu_cores"], 3),
        _list(run["worker_peak_rss_mib"], 1),
        "not measured" if run["postgres_cpu_cores"] is None else f"{run['postgres_cpu_cores']:.3f}",
        "**held**" if run["held"] else "**did not hold**",
        "passed" if run["checks_passed"] else "FAILED: " + ", ".join(run["failed_checks"]),
    ]
    return "| " + " | ".join(cells) + " |"


def _verdicts(report: dict[str, Any]) -> list[str]:
    lines = []
    for run in report["runs"]:
        plan, age = run["plan"], run["queue_age_s"]
        shape = (
            f"{plan['workers']} {_X} {plan['slots']} ({plan['label']}, {plan['total_slots']} slots)"
        )
        thirds = run["queue_age_p95_by_third_s"]
        trend = (
            f"; queue age p95 by third of the run {thirds[0]:.2f} s, then "
            + ", ".join(f"{v:.2f} s" for v in thirds[1:])
            if thirds and all(v is not None for v in thirds)
            else ""
        )
        verdict = "held" if run["held"] else "did not hold"
        lines.append(
            f"- {shape} {verdict}: the longest wait for a slot was {_s(age.get('max'))} "
            f"(bound {plan['bound_s']:g} s){trend}."
        )
    return lines


def render_sizing_report(report: dict[str, Any]) -> str:
    size = report["stint_size"]
    chosen = size.get("recommended")
    first = report["runs"][0]["plan"] if report["runs"] else None
    answer = (
        "nothing fits"
        if chosen is None
        else f"**{chosen['workers']} {_X} {chosen['slots_per_worker']}**"
    )
    stable = "stable" if size["stability"]["stable"] else "not stable"
    lines = [
        *report_head(
            f"Sizing validation: `{size['command']}`", report["generated_at"], report["command"]
        ),
        f"Load average (1, 5, 15 min) at the start {report['load_average']['start']}, at the "
        f"end {report['load_average']['end']}; {report['backend']}; "
        f"{report['environment'].get('cpus')} CPUs.",
        "",
        "## The recommendation",
        "",
        f"`{size['command']}` answered {answer}: {size['slots']['needed']} slots needed "
        f"({size['slots']['busy']:g} busy, by {size['slots']['rule']}), by the rule: "
        f"{size['rule']}; {stable} across every cost's measured range "
        f"(report {size['costs']['report_generated_at']}).",
        "",
        "## The runs",
        "",
    ]
    if first is not None:
        lines += [
            f"Time scale {first['time_scale']:g}: turns of {first['turn_seconds']:g} s wait "
            f"{first['run_turn_ms'] / 1000:g} s and arrive at {first['run_rate']:g}/s "
            f"({first['rate']:g}/s {_X} {first['time_scale']:g}) as a Poisson process for "
            f"{first['seconds']:g} s ({first['seconds'] * first['time_scale'] / 60:g} minutes at "
            f"the real rate); busy slots on average {first['busy_slots']:g} either way. Each "
            "configuration runs on a fresh PostgreSQL. *Held*: no turn waited longer than the "
            "bound for a slot (enqueue to first claim, database clock). Ages are in the run's "
            "time; CPU is cores over the arrivals.",
            "",
        ]
    lines += [
        "| Configuration | Slots | Turns | Queue age p50 | p95 | max | p95 by third (s) "
        "| Busy slots mean / p95 / max | Worker CPU cores (each) | Worker peak RSS MiB "
        "| PostgreSQL CPU cores | Held | Checks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(_row(run) for run in report["runs"]),
        "",
        *_verdicts(report),
        "",
        "## Reading it",
        "",
        "- Time scaling keeps the busy slots (rate x seconds) but not the background: polls, "
        "lease renewals and claims run at their real pace, so at a scale of 10 the turns' own "
        "CPU weighs ten times more against them than it would at the real rate. The workers' "
        "CPU here is therefore an upper bound for the real workload's.",
        "- The machine is shared (see the load averages): latencies and CPU are noisy; the "
        "checks are exact, and each verdict's margin to the bound is in the lines above.",
        "",
    ]
    return "\n".join(lines)


def write_sizing_report(report_dir: Path, report: dict[str, Any]) -> Path:
    """Write ``sizing.json`` and ``sizing.md``; return the JSON's path."""
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / "sizing.json"
    path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    (report_dir / "sizing.md").write_text(render_sizing_report(report))
    return path
