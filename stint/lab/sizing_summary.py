"""The matrix report's sizing part: the costs per configuration, the ranges
``stint size`` uses, what the machine could not tell, and one worked example
(``stint size --rate 5 --turn-seconds 20`` on this very report). The same
example ends the load run's terminal output, so ``pytest loadtest --run-load``
answers the sizing question it is run for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stint.lab.costs import CPU_BOUND_CEILING_SHARE, CPU_BOUND_HOST_BUSY
from stint.lab.environment import shown_path
from stint.ops.sizing import Sizing, Workload, size
from stint.ops.sizing_costs import SizingError, cost_model
from stint.ops.sizing_render import cpu_bound_cells, validation_command

__all__ = ["EXAMPLE", "example_sizing", "sizing_section", "sizing_summary_lines"]

EXAMPLE = Workload(rate=5.0, turn_seconds=20.0)
"""The worked example: five 20-second turns a second (100 busy slots)."""
_X = "\N{MULTIPLICATION SIGN}"
_DASH = "\N{EN DASH}"
_NOT_MEASURED = "not measured"
_COLUMNS = (
    ("worker_cpu_ms_per_turn", "Worker CPU ms/turn", 2),
    ("pg_cpu_ms_per_turn", "PostgreSQL CPU ms/turn", 2),
    ("idle_worker_cpu_ms_per_s", "Idle worker CPU ms/s", 1),
    ("idle_pg_cpu_ms_per_s", "PostgreSQL CPU ms/s per idle worker", 1),
    ("busy_worker_cpu_ms_per_s", "Worker CPU ms/s, every slot waiting", 1),
    ("wait_worker_cpu_ms_per_slot_s", "Waiting CPU ms per slot-second", 3),
    ("claim_p95_ms", "Claim p95 ms", 0),
    ("peak_rss_mib_per_worker", "Peak RSS MiB per worker", 1),
    ("db_connections_per_worker", "Connections per worker", 1),
    ("host_cpu_busy", "Host CPU busy (warm)", 2),
)


def _fmt(span: list[float] | None, digits: int) -> str:
    if span is None:
        return _NOT_MEASURED
    low, high = (f"{v:.{digits}f}" for v in span)
    return low if low == high else f"{low}{_DASH}{high}"


def example_sizing(matrix: dict[str, Any]) -> Sizing | None:
    """The worked example sized from this report; None when it cannot size (a
    partial run without the scripted fixture, say)."""
    try:
        return size(cost_model(matrix, "scripted"), EXAMPLE)
    except SizingError:
        return None


def _table(profile: dict[str, Any]) -> list[str]:
    header = [
        "Harness",
        f"Workers {_X} slots",
        *(title for _, title, _ in _COLUMNS),
        "CPU-bound reps",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for harness, section in profile["harnesses"].items():
        for c in section["configurations"]:
            cells = [
                harness,
                c["configuration"],
                *(_fmt(c[key], digits) for key, _, digits in _COLUMNS),
                f"{c['cpu_bound_reps']}/{c['reps']}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _ranges(profile: dict[str, Any]) -> list[str]:
    lines = []
    for harness, section in profile["harnesses"].items():
        costs, memory = section["costs"], section["memory"] or {}
        lines.append(
            f"- {harness} ({section['configurations_used']} configurations passed): worker CPU "
            f"{_fmt(costs['worker_cpu_ms_per_turn'], 2)} ms per turn, "
            f"{_fmt(costs['idle_worker_cpu_ms_per_s'], 1)} ms/s idle, "
            f"{_fmt(costs['busy_worker_cpu_ms_per_s'], 1)} ms/s with every slot waiting; "
            f"PostgreSQL CPU {_fmt(costs['pg_cpu_ms_per_turn'], 2)} ms per turn; RSS "
            f"{_fmt(memory.get('rss_mib_base'), 1)} MiB + "
            f"{_fmt(memory.get('rss_mib_per_slot'), 3)} MiB per slot "
            f"({memory.get('per_slot_from', 'no fit')}, slots "
            f"{', '.join(str(s) for s in memory.get('slots_measured', []))}); "
            f"{_fmt(costs['db_connections_per_worker'], 1)} connections per worker"
        )
    return lines


def _cpu_bound(profile: dict[str, Any]) -> list[str]:
    cpus = profile["machine"].get("cpus")
    lines = []
    for harness, section in profile["harnesses"].items():
        if section["cpu_bound"]:
            cells = cpu_bound_cells(section["cpu_bound"], len(section["configurations"]))
            lines.append(f"{harness}: {cells}")
    if not lines:
        return [f"- The machine ({cpus} CPUs) was not CPU-bound in any case."]
    return [
        f"- The machine ({cpus} CPUs, shared with whatever else ran) was CPU-bound (host "
        f"{CPU_BOUND_HOST_BUSY:.0%} busy or more during the warm burst, or the burst at "
        f"{CPU_BOUND_CEILING_SHARE:.0%} of its CPU ceiling) in: {'; '.join(lines)}. There "
        "the turns/s and fractions of the limit say how this machine ran out of CPU, not "
        "what Stint needs; the CPU per turn still holds (contention adds waiting, not CPU "
        "time)."
    ]


def _example(sizing: Sizing | None) -> list[str]:
    if sizing is None:
        return ["- No worked example: the report has no scripted fixture cases to size from."]
    lines = [
        f"- `stint size --report matrix.json --rate {EXAMPLE.rate:g} --turn-seconds "
        f"{EXAMPLE.turn_seconds:g}` on this report: {sizing.slots.needed} slots needed "
        f"({sizing.slots.busy:g} busy); "
    ]
    chosen = sizing.recommended
    if chosen is None:
        lines[0] += f"nothing fits ({sizing.rule})."
        return lines
    stable = "stable" if sizing.stability.stable else "NOT stable (see stint size)"
    lines[0] += (
        f"recommended **{chosen.workers} {_X} {chosen.slots_per_worker}** by the rule: "
        f"{sizing.rule}; {stable} across every cost's measured range. Options:"
    )
    lines += [
        "",
        f"| Workers {_X} slots | Slots (one lost) | Memory MiB | Connections "
        "| Worker CPU ms/s (of budget) | PostgreSQL CPU cores |",
        "|---|---|---|---|---|---|",
    ]
    for o in sizing.options:
        mark = " (recommended)" if o.recommended else ""
        pg = _NOT_MEASURED if o.postgres_cpu_cores is None else f"{o.postgres_cpu_cores:.3f}"
        lines.append(
            f"| {o.workers} {_X} {o.slots_per_worker}{mark} | {o.total_slots} "
            f"({o.slots_after_one_lost}) | {o.memory_mib:.0f} | {o.db_connections} "
            f"| {o.worker_cpu_ms_per_s:.1f} ({o.worker_cpu_share_of_budget:.1%}) | {pg} |"
        )
    lines += ["", f"- Prove it on a throwaway PostgreSQL: `{validation_command(sizing)}`."]
    return lines


def sizing_section(matrix: dict[str, Any]) -> list[str]:
    """Markdown lines for matrix.md."""
    profile = matrix["sizing"]
    return [
        "## Costs for sizing",
        "",
        "What `stint size` computes with, each measured over a phase of its own in every case: "
        "the workers' and PostgreSQL's CPU over the warm burst divided by its turns; a "
        "worker's CPU per second idle (1.5 s with nothing queued: it polls for work) and with "
        "every slot waiting in its tool (1.5 s of a 3 s wait; scripted only), the latter above "
        "idle per slot-second; the claim (enqueue to start of the turns that found a slot "
        "free); the host's busy share during the warm burst. PostgreSQL's figures leave out "
        "the load test's own probes. Ranges are over the reps.",
        "",
        *_table(profile),
        "",
        "The ranges `stint size` uses (over every configuration that passed its checks; it "
        "sizes at the top of each and checks the bottom gives the same answer):",
        "",
        *_ranges(profile),
        "",
        "What transfers to other hardware: CPU per turn and per second (scaled by your cores' "
        "speed), memory per worker and per slot, connections per worker. What does not: "
        "turns/s, fractions of the limit and burst latencies.",
        "",
        *_cpu_bound(profile),
        *_example(example_sizing(matrix)),
    ]


def sizing_summary_lines(matrix_path: Path, matrix: dict[str, Any]) -> list[str]:
    """The load run's closing lines: the costs measured and the worked example."""
    sizing = example_sizing(matrix)
    if sizing is None:
        return ["sizing: no scripted fixture cases in this run, nothing to size from"]
    costs = sizing.costs["figures"]
    lines = [
        f"sizing costs (scripted): worker CPU {_fmt(costs['worker_cpu_ms_per_turn'], 2)} ms/turn, "
        f"PostgreSQL {_fmt(costs['pg_cpu_ms_per_turn'], 2)} ms/turn, RSS "
        f"{_fmt(costs['rss_mib_base'], 1)} MiB + {_fmt(costs['rss_mib_per_slot'], 3)} MiB/slot, "
        f"{_fmt(costs['db_connections_per_worker'], 0)} connections per worker",
    ]
    chosen = sizing.recommended
    answer = (
        "nothing fits"
        if chosen is None
        else f"{chosen.workers} workers {_X} {chosen.slots_per_worker} slots"
        + ("" if sizing.stability.stable else " (not stable: see stint size)")
    )
    lines.append(
        f"sizing example: stint size --report {shown_path(matrix_path)} --rate {EXAMPLE.rate:g} "
        f"--turn-seconds {EXAMPLE.turn_seconds:g} -> {answer}"
    )
    return lines
