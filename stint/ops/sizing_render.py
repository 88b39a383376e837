"""``stint size`` in words: the answer and its rule first, then the options, the
costs behind them, whether the answer is stable, and what the report cannot know."""

from __future__ import annotations

from typing import Any

from stint.ops.sizing import Option, Sizing

__all__ = ["cpu_bound_cells", "render_sizing", "validation_command"]

_X = "\N{MULTIPLICATION SIGN}"
_DASH = "\N{EN DASH}"
_HEADERS = (
    f"workers {_X} slots",
    "slots (one lost)",
    "memory",
    "connections",
    "worker CPU (of budget)",
    "PostgreSQL CPU",
    "a crash",
    "a drain",
)


def _range(value: list[float] | None, digits: int, unit: str = "") -> str:
    if value is None:
        return "not measured"
    low, high = (f"{v:.{digits}f}" for v in value)
    return f"{low}{unit}" if low == high else f"{low}{_DASH}{high}{unit}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _row(option: Option, sizing: Sizing) -> list[str]:
    lease, drain = sizing.budget.lease_seconds, sizing.budget.drain_seconds
    turn = sizing.workload.turn_seconds
    turns = _count(option.drain_turns, "turn")
    drained = (
        f"{turns}, ~{turn:g} s" if turn <= drain else f"{turns}, handed back after {drain:g} s"
    )
    shape = f"{option.workers} {_X} {option.slots_per_worker}"
    if option.recommended:
        shape += " (recommended)"
    elif not option.fits:
        shape += " (does not fit)"
    postgres = (
        "not measured"
        if option.postgres_cpu_cores is None
        else f"{option.postgres_cpu_cores:.3f} cores"
    )
    return [
        shape,
        f"{option.total_slots} ({option.slots_after_one_lost})",
        f"{option.workers} {_X} {option.memory_mib_per_worker:.0f} = {option.memory_mib:.0f} MiB",
        str(option.db_connections),
        f"{option.worker_cpu_ms_per_s:.1f} ms/s ({option.worker_cpu_share_of_budget:.1%})",
        postgres,
        f"{_count(option.crash_sessions, 'session')} wait <= {lease:g} s",
        drained,
    ]


def _table(sizing: Sizing) -> list[str]:
    rows = [list(_HEADERS), *(_row(o, sizing) for o in sizing.options)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADERS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return [lines[0], "  ".join("-" * w for w in widths), *lines[1:]]


def _slots_line(sizing: Sizing) -> str:
    w, s = sizing.workload, sizing.slots
    busy = f"{w.rate:g} turns/s {_X} {w.turn_seconds:g} s = {s.busy:g} busy slots (Little's law)"
    headroom = f"{s.by_headroom} with {w.headroom:.0%} headroom"
    queueing = (
        f"{s.by_queueing} for at most {w.wait_target:.0%} of turns to wait for a slot (Erlang C)"
    )
    first, second = (headroom, queueing) if s.rule == "headroom" else (queueing, headroom)
    return f"{busy}; {s.needed} needed: {first}, more than the {second}."


def _answer(sizing: Sizing) -> list[str]:
    chosen = sizing.recommended
    if chosen is None:
        why = "; ".join(o.why_not[0] for o in sizing.options[:1] if o.why_not)
        return [f"Recommended: nothing fits ({sizing.rule}){': ' + why if why else ''}."]
    return [
        f"Recommended: {chosen.workers} workers {_X} {chosen.slots_per_worker} slots "
        f"({chosen.total_slots} slots; {chosen.slots_after_one_lost} with one worker lost)",
        f"  by the rule: {sizing.rule}.",
    ]


def _below_zero(span: list[float] | None) -> str:
    if span is None or span[1] >= 0:
        return ""
    return " (below zero: a worker whose slots all wait stops polling; counted as zero)"


def _costs(sizing: Sizing) -> list[str]:
    costs = sizing.costs
    f = costs["figures"]
    yours = " (yours)" if "worker_cpu_ms_per_turn" in costs["yours"] else ""
    lines = [
        f"Costs ({costs['harness']} harness, the range over {costs['configurations_used']} "
        "measured configurations; the top of each range is used):",
        f"- worker CPU: {_range(f['worker_cpu_ms_per_turn'], 2, ' ms')} per turn{yours}; "
        f"{_range(f['idle_worker_cpu_ms_per_s'], 1, ' ms/s')} idle, "
        f"{_range(f['busy_worker_cpu_ms_per_s'], 1, ' ms/s')} with every slot waiting; "
        f"{_range(f['wait_worker_cpu_ms_per_slot_s'], 3, ' ms')} per slot-second of waiting"
        + _below_zero(f["wait_worker_cpu_ms_per_slot_s"]),
        f"- PostgreSQL CPU: {_range(f['pg_cpu_ms_per_turn'], 2, ' ms')} per turn, "
        f"{_range(f['idle_pg_cpu_ms_per_s'], 1, ' ms/s')} per idle worker's polling",
        f"- memory: {_range(f['rss_mib_base'], 1, ' MiB')} per worker + "
        f"{_range(f['rss_mib_per_slot'], 3, ' MiB')} per slot; "
        f"{_range(f['db_connections_per_worker'], 0)} connections per worker",
    ]
    if costs["claim_p95_ms"] is not None:
        lines.append(
            f"- a free slot starts a queued turn within {_range(costs['claim_p95_ms'], 0, ' ms')} "
            "(p95 of the bursts' first waves)"
        )
    return lines


def _stability(sizing: Sizing) -> list[str]:
    st = sizing.stability
    shape = "no recommendation" if sizing.recommended is None else sizing.recommended.shape
    if st.stable:
        return [
            f"Stable: each of the {len(st.checked)} measured figures at the bottom of its range, "
            f"and all of them at once, give the same answer ({shape.replace('x', _X)})."
        ]
    lines = ["Not stable: the answer depends on where these figures really are:"]
    for d in st.deciding:
        at = "" if d["at"] is None else f" at {d['at']:g}"
        lines.append(f"- {d['figure']}{at}: {d['recommended'].replace('x', _X)}")
    return lines


def _bound(cell: dict[str, Any]) -> str:
    busy = cell["host_cpu_busy"]
    host = "" if busy is None else f", host {_range([100 * v for v in busy], 0, '%')} busy"
    return f"{cell['configuration']} ({cell['reps']} of {cell['of']} reps{host})"


def cpu_bound_cells(cells: list[dict[str, Any]], measured: int) -> str:
    """Where a report's machine was CPU-bound, in words: every configuration at once
    when all were (a busy shared machine), else each by name."""
    whole = all(c["reps"] == c["of"] for c in cells)
    if cells and len(cells) >= measured and whole:
        lows = [c["host_cpu_busy"][0] for c in cells if c["host_cpu_busy"] is not None]
        least = f"{min(lows):.0%}" if lows else ""
        busy = (
            "" if not lows else f", the host {'at least ' if least != '100%' else ''}{least} busy"
        )
        return f"every one of its {len(cells)} configurations (every rep{busy})"
    return "; ".join(_bound(c) for c in cells)


def _cannot_know(sizing: Sizing) -> list[str]:
    costs = sizing.costs
    lines = ["What the report cannot know:"]
    bound = costs["cpu_bound"]
    cpus = costs["machine_cpus"]
    machine = f"its machine ({cpus} CPUs)" if cpus else "its machine"
    if bound:
        cells = cpu_bound_cells(bound, costs["configurations_used"])
        lines.append(
            f"- {machine} was CPU-bound in {cells}: their turns/s and fractions of the "
            "limit say how that machine ran out of CPU, not what a turn needs; the CPU per "
            "turn was still measured (contention adds waiting, not CPU time)."
        )
    else:
        lines.append(f"- {machine} was not CPU-bound in any measured configuration.")
    lines.append(
        "- These transfer to other hardware: CPU per turn and per second (scale by your cores' "
        "speed against the report's), MiB per worker and per slot, connections per worker. "
        "These do not: turns/s, fractions of the limit, burst latencies."
    )
    return lines


def validation_command(sizing: Sizing) -> str:
    """The load-test command that runs this recommendation against a real PostgreSQL."""
    w = sizing.workload
    scale = max(1, round(w.turn_seconds / 2)) if w.turn_seconds > 2 else 1
    return (
        f"pytest loadtest --run-load -k sizing --size-rate {w.rate:g} "
        f"--size-turn-seconds {w.turn_seconds:g} --time-scale {scale}"
    )


def render_sizing(sizing: Sizing, *, report: str) -> str:
    """Readable lines: the answer first, then how it was reached."""
    costs = sizing.costs
    made = costs["report_generated_at"] or "time not recorded"
    lines = [
        _slots_line(sizing),
        "",
        *_answer(sizing),
        "",
        *_table(sizing),
        "",
        *_costs(sizing),
        "",
        *_stability(sizing),
        "",
        *_cannot_know(sizing),
        "",
        "Notes:",
        *(f"- {note}" for note in sizing.notes),
        "",
        f"Report: {report} ({made}). Prove it on a throwaway PostgreSQL:",
        f"  {validation_command(sizing)}",
    ]
    return "\n".join(lines)
