"""``docs/load/scale.md`` and ``scale.json`` from a scale run's figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stint.lab.report_head import report_head

__all__ = ["write_scale"]

_NOT_MEASURED = "not measured"


def _cell(value: Any, unit: str = "") -> str:
    return _NOT_MEASURED if value is None else f"{value}{unit}"


def render_scale(figures: dict[str, Any]) -> str:
    plan = figures["plan"]
    age = figures["queue_age_s"]
    lines = [
        *report_head(
            "Scale soak: 100,000 turns with retention running",
            figures["generated_at"],
            figures["command"],
        ),
        f"{plan['turns']:,} zero-wait scripted turns offered at {plan['rate']:g} turns/s "
        "(enqueued/s: what the producer managed, several enqueues in flight) over "
        f"{plan['workers']} workers {chr(215)} {plan['slots']} slots, {plan['turns_per_session']} "
        f"turns per session, with {plan['parked']:,} sessions parked on questions all along and "
        f"retention keeping {plan['retain_seconds']:g} s of history (pruned every "
        f"{plan['prune_interval']:g} s by the elected worker). PostgreSQL: "
        f"{figures['backend']}.",
        "",
        f"- Claim statement with {plan['parked']:,} parked sessions and nothing ready, before "
        f"the load: {_cell(figures['claim_ms_with_parked_before_load'], ' ms')} mean.",
        "- Queue age (oldest ready session, sampled every 0.5 s): "
        f"p50 {_cell(age['p50'], ' s')}, p95 {_cell(age['p95'], ' s')}, "
        f"max {_cell(age['max'], ' s')}.",
        f"- Checks at the end: {figures['checks_summary']}.",
        "",
        "## Per window",
        "",
        "| finished | enqueued/s | turns/s | claim ms | finish ms | step ms (start/finish) "
        "| renew ms | oldest ready max | worker RSS MiB | turns/s per PG CPU-s "
        "| same, the probe left out | events MiB | turns MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in figures["windows"]:
        ms = w["statements_ms"]
        rss = w["worker_rss_mib"]
        lines.append(
            f"| {w['finished']:,} | {_cell(w.get('enqueued_per_s'))} | {w['turns_per_s']} "
            f"| {_cell(ms.get('turns_claim'))} "
            f"| {_cell(ms.get('turns_finish'))} "
            f"| {_cell(ms.get('steps_start'))}/{_cell(ms.get('steps_finish'))} "
            f"| {_cell(ms.get('leases_renew'))} | {_cell(w['oldest_ready_age_max_s'], ' s')} "
            f"| {min(rss) if rss else _NOT_MEASURED}{chr(8211)}{max(rss) if rss else ''} "
            f"| {_cell(w['turns_per_pg_cpu_second'])} "
            f"| {_cell(w.get('turns_per_pg_cpu_second_without_probe'))} "
            f"| {w['table_mib'].get('events', _NOT_MEASURED)} "
            f"| {w['table_mib'].get('turns', _NOT_MEASURED)} |"
        )
    lines += [
        "",
        "Statement times are pg_stat_statements' mean execution time within the window (the "
        "server's time, not the round trip). Table sizes include indexes and toast, sampled "
        "without VACUUM at the window's end. Full figures: [scale.json](scale.json).",
        "",
        *_cpu_by_kind(figures),
        *_statements(figures),
    ]
    return "\n".join(lines)


def _cpu_by_kind(figures: dict[str, Any]) -> list[str]:
    """PostgreSQL's CPU over every window, split by what each server process served."""
    totals: dict[str, float] = {}
    for w in figures["windows"]:
        if not w.get("pg_cpu_by_kind"):
            return []  # a run from before the split, or a backend without a postmaster
        for kind, seconds in w["pg_cpu_by_kind"].items():
            totals[kind] = totals.get(kind, 0.0) + seconds
    turns = figures["windows"][-1]["finished"]
    whole = sum(totals.values())
    if whole <= 0 or turns <= 0:
        return []
    lines = [
        "## Where PostgreSQL's CPU went",
        "",
        "Each server process's CPU clock, read at every window's edge and named by "
        "`pg_stat_activity` (the connection's application_name, or its backend_type). "
        "`stint-worker-*`: the workers' pools and LISTEN connections; `stint-cli`: the "
        "producer's enqueues; `stint-load-probe`: this soak's own sampling (left out of "
        "the second turns per CPU-second column); exited processes: server processes that "
        "ended within a window (autovacuum workers, mostly), counted in clock ticks.",
        "",
        "| process | CPU s, all windows | share | ms per turn |",
        "|---|---|---|---|",
    ]
    for kind, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        lines.append(
            f"| {kind} | {seconds:.2f} | {seconds / whole:.1%} | {1000 * seconds / turns:.3f} |"
        )
    lines.append(f"| all | {whole:.2f} | 100% | {1000 * whole / turns:.3f} |")
    lines.append("")
    return lines


def _statements(figures: dict[str, Any]) -> list[str]:
    """The last window's statements by the server time they took, per finished turn."""
    last = figures["windows"][-1] if figures["windows"] else {}
    top = last.get("statements_per_turn")
    if not top:
        return []
    lines = [
        "## The statements behind it (last window)",
        "",
        "pg_stat_statements over the last window, per finished turn: calls, and execution "
        "time (the server's time inside the statement; parsing, the protocol and commits' "
        "WAL flushes are outside it).",
        "",
        "| statement | calls per turn | execution ms per turn |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | {s['calls']} | {s['exec_ms']} |" for name, s in top.items()]
    lines.append("")
    return lines


def write_scale(out_dir: Path, figures: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scale.json").write_text(json.dumps(figures, indent=2) + "\n")
    path = out_dir / "scale.md"
    path.write_text(render_scale(figures))
    return path
