"""The load test's report: per-case JSON, ``matrix.json``, ``matrix.md`` and charts.

Operators size deployments (workers x slots) from this, so it shows observed
ranges over repetitions, never a single flattering number, and ``null`` /
"not measured" wherever a figure was not measured — never a made-up zero. The
table follows the seed measurement's layout so the two can be compared line by
line. Charts are drawn on matplotlib ``Figure`` objects (Agg, no display).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from stint.lab.model import SCHEMA_VERSION
from stint.lab.report_head import report_head
from stint.lab.sizing_profile import RANGED_COSTS, sizing_profile
from stint.lab.sizing_summary import sizing_section

__all__ = [
    "build_matrix",
    "main",
    "render_charts",
    "render_markdown",
    "rerender_matrix",
    "write_case",
    "write_matrix",
]

Span = list[float] | None
_GROUP = ("harness", "workers", "slots", "sessions", "tool_wait_ms", "model_latency_ms")
# Cases written before the agents harness had no harness or model latency fields.
_GROUP_DEFAULTS: dict[str, Any] = {"harness": "scripted", "model_latency_ms": 0}
_PHASE_FIGURES = ("turns_per_s", "fraction_of_limit", "e2e_p95_s", "handoff_p95_ms", "claim_p95_ms")
# Each case's cost figures (model.Costs) a summary row gives as ranges over its reps.
_COST_FIGURES = (
    *RANGED_COSTS,
    "host_cpu_busy",
    "cpu_ceiling_turns_per_s",
    "cpu_ceiling_fraction",
)
_CHARTS = ("throughput.png", "p95.png", "rss.png")
_NOT_MEASURED = "not measured"
_X = "\N{MULTIPLICATION SIGN}"
_DASH = "\N{EN DASH}"  # the seed's table writes ranges with an en dash
# (phase, x offset so cold and warm sit side by side, colour, marker)
_PHASE_STYLES = (("cold", -0.12, "tab:blue", "v"), ("warm", 0.12, "tab:orange", "o"))


def _write_json(path: Path, value: Any) -> None:
    # allow_nan=False: a NaN would be invalid JSON and a figure nobody measured.
    # default=str, as `stint check --json` does: check evidence may hold times and ids.
    path.write_text(json.dumps(value, indent=2, allow_nan=False, default=str) + "\n")


def write_case(report_dir: Path, case: dict[str, Any]) -> Path:
    """Write one case (``CaseReport.as_json()``) as ``cases/<label>.json``, as soon as it ends."""
    folder = report_dir / "cases"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case['case']['label']}.json"
    _write_json(path, case)
    return path


def _span(values: Iterable[Any]) -> Span:
    """[min, max] of the measured values; None when none was measured."""
    found = [float(v) for v in values if v is not None]
    return [min(found), max(found)] if found else None


def _most(values: Iterable[Any]) -> float | None:
    found = [float(v) for v in values if v is not None]
    return max(found) if found else None


def _sample(case: dict[str, Any], key: str) -> Any:
    samples = case.get("samples")
    return samples.get(key) if samples else None


def _costs(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Each cost figure's range over the reps, how many reps were CPU-bound, and the
    load averages (1 minute) the reps started at. Cases of schema 1 measured none."""
    measured = [c["costs"] for c in cases if c.get("costs")]
    return {
        **{key: _span(m.get(key) for m in measured) for key in _COST_FIGURES},
        "cpu_bound_reps": sum(1 for m in measured if m.get("cpu_bound")),
        "load_average_1m": _span(m["load_average"][0] for m in measured if m.get("load_average")),
    }


def _phase(cases: list[dict[str, Any]], name: str) -> dict[str, Span]:
    phases = [c["phases"][name] for c in cases]
    return {key: _span(p.get(key) if p else None for p in phases) for key in _PHASE_FIGURES}


def _group_value(case: dict[str, Any], key: str) -> Any:
    return case["case"].get(key, _GROUP_DEFAULTS.get(key))


def _summary_row(cases: list[dict[str, Any]]) -> dict[str, Any]:
    spec = cases[0]["case"]
    return {
        **{key: _group_value(cases[0], key) for key in _GROUP},
        "reps": len(cases),
        "total_slots": spec["workers"] * spec["slots"],
        "physical_limit_turns_per_s": cases[0]["physical_limit_turns_per_s"],
        "cold": _phase(cases, "cold"),
        "warm": _phase(cases, "warm"),
        "peak_sum_rss_mib": _span(_sample(c, "peak_sum_rss_mib") for c in cases),
        "peak_rss_mib_per_worker_max": _most(
            v for c in cases for v in (_sample(c, "peak_rss_mib_per_worker") or [])
        ),
        "peak_uss_mib_per_worker_max": _most(
            v for c in cases for v in (_sample(c, "peak_uss_mib_per_worker") or [])
        ),
        "worker_cpu_seconds": _span(_sample(c, "worker_cpu_seconds") for c in cases),
        "peak_rss_mib_per_worker": _span(
            max(_sample(c, "peak_rss_mib_per_worker") or [], default=None) for c in cases
        ),
        "db_connections_per_worker": _span(_sample(c, "db_connections_per_worker") for c in cases),
        "costs": _costs(cases),
        "idle_drain_s": _span(c.get("idle_drain_s") for c in cases),
        "warm_enqueue_ms": _span(c.get("warm_enqueue_ms") for c in cases),
        "pg_peak_memory_mib_max": _most(_sample(c, "pg_peak_memory_mib") for c in cases),
        "db_connections_per_worker_max": _most(
            _sample(c, "db_connections_per_worker") for c in cases
        ),
        "passed_reps": sum(1 for c in cases if c["passed"]),
        "all_checks_passed": all(c["passed"] for c in cases),
    }


def _summary(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for case in cases:
        groups.setdefault(tuple(_group_value(case, key) for key in _GROUP), []).append(case)

    def order(key: tuple[Any, ...]) -> tuple[Any, ...]:
        harness, workers, slots, sessions, wait, latency = key
        scripted = harness == "scripted"
        return (not scripted, wait if scripted else latency, sessions, workers * slots, workers)

    return [_summary_row(groups[key]) for key in sorted(groups, key=order)]


def build_matrix(
    cases: list[dict[str, Any]],
    *,
    command: str,
    environment: dict[str, Any],
    backend: dict[str, Any],
    generated_at: str,
) -> dict[str, Any]:
    """``matrix.json``: the cases, one summary row per configuration, the sizing profile."""
    summary = _summary(cases)
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": generated_at,
        "command": command,
        "environment": environment,
        "backend": backend,
        "cases": cases,
        "summary": summary,
        "sizing": sizing_profile(summary, environment=environment, backend=backend),
    }


# ---- matrix.md ---------------------------------------------------------------


def _fmt(span: Span, digits: int, unit: str = "") -> str:
    """ "a-b" with an en dash, as in the seed; one value when both ends print the same."""
    if span is None:
        return _NOT_MEASURED
    low, high = (f"{v:.{digits}f}" for v in span)
    return f"{low}{unit}" if low == high else f"{low}{_DASH}{high}{unit}"


def _one(value: float | None, digits: int, unit: str = "") -> str:
    return _NOT_MEASURED if value is None else f"{value:.{digits}f}{unit}"


def _limits(value: Any) -> str:
    if not value or value == "unlimited":
        return "unlimited"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def _config(row: dict[str, Any]) -> str:
    return f"{row['workers']} {_X} {row['slots']}"


_CEILING_HEAD = (
    "| Worker CPU ms/turn (warm) | PostgreSQL CPU ms/turn (warm) | CPU ceiling turns/s "
    "| Fraction of the CPU ceiling (warm) |"
)


def _ceiling_cells(row: dict[str, Any]) -> list[str]:
    """Each rep's CPU per turn (workers, PostgreSQL), the CPU ceiling it gives, and the
    warm burst's share of it: ranges over the reps."""
    costs = row.get("costs") or {}
    return [
        _fmt(costs.get("worker_cpu_ms_per_turn"), 2),
        _fmt(costs.get("pg_cpu_ms_per_turn"), 2),
        _fmt(costs.get("cpu_ceiling_turns_per_s"), 0),
        _fmt(costs.get("cpu_ceiling_fraction"), 2),
    ]


def _results_table(summary: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"| Workers {_X} slots each | Sessions | Tool wait | Completed turns/s (warm) "
        "| Completed turns/s (cold) | Fraction of limit (warm) | End-to-end p95 (warm) "
        "| Handoff p95 (warm) | Peak sum worker RSS | Worker CPU-s " + _CEILING_HEAD,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary:
        warm, cold = row["warm"], row["cold"]
        cells = [
            _config(row),
            str(row["sessions"]),
            f"{row['tool_wait_ms']}ms",
            _fmt(warm["turns_per_s"], 2),
            _fmt(cold["turns_per_s"], 2),
            _fmt(warm["fraction_of_limit"], 2),
            _fmt(warm["e2e_p95_s"], 2, "s"),
            _fmt(warm.get("handoff_p95_ms"), 1, "ms"),
            _fmt(row["peak_sum_rss_mib"], 0, "MiB"),
            _fmt(row["worker_cpu_seconds"], 2),
            *_ceiling_cells(row),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _detail_table(summary: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"| Workers {_X} slots each | Sessions | Tool wait | Reps passed "
        "| Physical limit turns/s "
        "| End-to-end p95 (cold) | Peak RSS per worker | Peak USS per worker "
        "| DB connections per worker | Idle drain | PostgreSQL peak memory "
        "| Warm burst's enqueue (one transaction) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary:
        cells = [
            _config(row),
            str(row["sessions"]),
            f"{row['tool_wait_ms']}ms",
            f"{row['passed_reps']}/{row['reps']}",
            f"{row['physical_limit_turns_per_s']:.2f}",
            _fmt(row["cold"]["e2e_p95_s"], 2, "s"),
            _one(row["peak_rss_mib_per_worker_max"], 0, "MiB"),
            _one(row["peak_uss_mib_per_worker_max"], 0, "MiB"),
            _one(row["db_connections_per_worker_max"], 1),
            _fmt(row["idle_drain_s"], 2, "s"),
            _one(row["pg_peak_memory_mib_max"], 0, "MiB"),
            _fmt(row["warm_enqueue_ms"], 1, "ms"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _work(row: dict[str, Any]) -> str:
    if row["harness"] != "scripted":
        return f"2{_X}{row['model_latency_ms']}ms model + journal tool"
    return f"{row['tool_wait_ms']}ms tool wait"


def _agents_section(summary: list[dict[str, Any]]) -> list[str]:
    """The agents harness's rows, each beside the scripted row of the same shape."""
    agents = [row for row in summary if row["harness"] != "scripted"]
    if not agents:
        return []
    lines = [
        "### The agents harness beside the scripted fixture",
        "",
        "`stint.agents:chat` against the fake OpenAI-compatible provider "
        "(`stint.lab.fake_provider`, in the load-test process): each turn is a model call "
        "that asks for the native journal tool, the tool, and a model call for the reply, "
        "each model call waiting the given latency before its first token and streaming its "
        "deltas into `message.delta` events; conversation memory is loaded and written per "
        "turn. The adapters' rows (`openai-agents`, `pydantic-ai`) run the same turn from an "
        "SDK agent with one `note` function tool (`stint.lab.load_agents`), its model calls "
        "and tool call durable steps through the same model step; they keep no memory. "
        "Physical limit = sessions / (waves "
        f"{_X} the turn's waits).",
        "",
        f"| Harness | Workers {_X} slots each | Sessions | Waits per turn | Reps passed "
        "| Completed turns/s (warm) | Completed turns/s (cold) | Fraction of limit (warm) "
        "| End-to-end p95 (warm) | Peak RSS per worker | Worker CPU-s " + _CEILING_HEAD,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in agents:
        twins = [
            r
            for r in summary
            if r["harness"] == "scripted"
            and (r["workers"], r["slots"], r["sessions"])
            == (row["workers"], row["slots"], row["sessions"])
            and r["tool_wait_ms"] == row["model_latency_ms"]
        ]
        for shown in (*twins, row):
            cells = [
                shown["harness"],
                _config(shown),
                str(shown["sessions"]),
                _work(shown),
                f"{shown['passed_reps']}/{shown['reps']}",
                _fmt(shown["warm"]["turns_per_s"], 2),
                _fmt(shown["cold"]["turns_per_s"], 2),
                _fmt(shown["warm"]["fraction_of_limit"], 2),
                _fmt(shown["warm"]["e2e_p95_s"], 2, "s"),
                _one(shown["peak_rss_mib_per_worker_max"], 0, "MiB"),
                _fmt(shown["worker_cpu_seconds"], 2),
                *_ceiling_cells(shown),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _checks_line(cases: list[dict[str, Any]]) -> str:
    tally: dict[str, list[int]] = {}
    for case in cases:
        for check in case["checks"]:
            counts = tally.setdefault(str(check["name"]), [0, 0])
            counts[0] += 1 if check["passed"] else 0
            counts[1] += 1
    passed = sum(1 for c in cases if c["passed"])
    detail = ", ".join(f"{name} {p}/{n}" for name, (p, n) in tally.items()) or "no checks ran"
    return f"{passed} of {len(cases)} cases passed all checks. Cases passing each check: {detail}."


def _environment_value(value: Any) -> str:
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def render_markdown(matrix: dict[str, Any]) -> str:
    """``matrix.md``: how it ran, the seed-style table, checks, sizing, charts and caveats."""
    summary, cases, backend = matrix["summary"], matrix["cases"], matrix["backend"]
    scripted = [row for row in summary if row["harness"] == "scripted"]
    lines = [
        *report_head(
            f"Stint load test: workers {_X} slots", matrix["generated_at"], matrix["command"]
        ),
        "## What ran",
        "",
        f"- Backend: {backend.get('kind', 'unknown')}, PostgreSQL "
        f"{backend.get('postgres_version') or 'version not recorded'}",
        f"- PostgreSQL limits: {_limits(backend.get('postgres_limits'))}",
        f"- Worker limits: {_limits(backend.get('worker_limits'))}",
        *(f"- {key}: {_environment_value(v)}" for key, v in matrix["environment"].items()),
        "",
        "## Results",
        "",
        f"Ranges are the observed minimum{_DASH}maximum over repetitions, "
        "not confidence intervals.",
        "",
        *_results_table(scripted),
        "",
        *_detail_table(scripted),
        "",
        *_agents_section(summary),
        _checks_line(cases),
        "",
        *sizing_section(matrix),
        "",
        "## Charts and per-case data",
        "",
        "![Completed turns/s against the physical limit](throughput.png)",
        "",
        "![End-to-end p95](p95.png)",
        "",
        "![Peak RSS per worker](rss.png)",
        "",
        *_timeline_section(cases),
        "Every case's full figures, checks and diagnostics: [cases/](cases/).",
        "",
        "## Notes",
        "",
        "- Ranges are the observed values over repetitions, not confidence intervals.",
        "- p95 is a per-repetition nearest-rank percentile of a small burst, not a production "
        "tail estimate.",
        "- Peak sum worker RSS is the sampled sum across worker processes and includes shared "
        "mappings; do not divide it by workers and call it a per-worker bound. It excludes "
        "PostgreSQL, tools in other processes and the filesystem cache.",
        "- Peak USS per worker is the memory only that worker maps (its heap and private "
        "pages): what one more worker adds on a host that already runs one; the shared "
        "libraries (Python, libpq, OpenSSL) are counted once per host.",
        "- Processes are sampled every 100 ms, so short peaks can be missed.",
        f"- Physical limit = sessions / (waves {_X} tool wait): "
        "every slot busy back to back. "
        "Fraction of limit is completed turns/s over it.",
        "- Each burst (cold, warm, hold) is one batch enqueue of one turn per session "
        "(`turns_enqueue_many`, one transaction), timed from that transaction's enqueue time.",
        "- CPU ceiling = this machine's cores / (worker + PostgreSQL CPU ms per turn), each "
        "rep's own, measured over its warm burst: the turns/s at which the workers and "
        "PostgreSQL would keep every core busy, whatever they wait for. Fraction of the CPU "
        "ceiling is the warm burst's turns/s over it: a cell near 1 was bounded by this "
        "machine's cores, not by Stint's waits. PostgreSQL's CPU leaves out the load test's "
        "own probes; the cgroup limits above (PostgreSQL's CPU share) can bind below it.",
        "- PostgreSQL's peak here is a small fresh dataset; do not size the database from it.",
        "",
    ]
    return "\n".join(lines)


# ---- charts ------------------------------------------------------------------


def _labels(summary: list[dict[str, Any]]) -> list[str]:
    labels = []
    for r in summary:
        label = (
            f"{r['workers']} {_X} {r['slots']} = {r['total_slots']} slot"
            f"{'' if r['total_slots'] == 1 else 's'}\n"
        )
        if r["harness"] != "scripted":
            label += (
                f"{r['sessions']} sessions\n{r['harness']}: 2{_X}{r['model_latency_ms']} ms model"
            )
        else:
            label += f"{r['sessions']} sessions, {r['tool_wait_ms']} ms"
        labels.append(label)
    return labels


def _new_axes(summary: list[dict[str, Any]], title: str, ylabel: str) -> tuple[Figure, Axes]:
    figure = Figure(figsize=(max(6.0, 1.7 * len(summary) + 2.0), 4.8), dpi=110)
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.set_ylabel(ylabel)
    axes.set_xlabel(f"configuration: workers {_X} slots each (total slots), burst")
    axes.set_xticks(range(len(summary)), _labels(summary), fontsize=8)
    axes.set_xlim(-0.6, max(len(summary), 1) - 0.4)
    axes.grid(axis="y", alpha=0.3)
    return figure, axes


def _phase_ranges(axes: Axes, summary: list[dict[str, Any]], figure_key: str) -> None:
    """Cold and warm min and max over repetitions: two markers joined by a line; nulls skipped."""
    for phase, offset, color, marker in _PHASE_STYLES:
        points = [
            (i + offset, span)
            for i, row in enumerate(summary)
            if (span := row[phase][figure_key]) is not None
        ]
        if not points:
            continue
        xs = [x for x, _ in points]
        lows = [span[0] for _, span in points]
        highs = [span[1] for _, span in points]
        axes.vlines(xs, lows, highs, colors=color, linewidth=2)
        axes.scatter(xs, lows, color=color, marker=marker, label=phase, zorder=3)
        axes.scatter(xs, highs, color=color, marker=marker, zorder=3)


def _save(figure: Figure, axes: Axes, path: Path) -> Path:
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.set_ylim(bottom=0)
    figure.savefig(path, bbox_inches="tight")
    return path


def _throughput(summary: list[dict[str, Any]], path: Path) -> Path:
    figure, axes = _new_axes(summary, f"Completed turns/s (min{_DASH}max over reps)", "turns/s")
    axes.scatter(
        range(len(summary)),
        [r["physical_limit_turns_per_s"] for r in summary],
        marker="_",
        s=900,
        color="black",
        label="physical limit (every slot busy)",
        zorder=2,
    )
    _phase_ranges(axes, summary, "turns_per_s")
    return _save(figure, axes, path)


def _p95(summary: list[dict[str, Any]], path: Path) -> Path:
    figure, axes = _new_axes(summary, f"End-to-end p95 (min{_DASH}max over reps)", "seconds")
    _phase_ranges(axes, summary, "e2e_p95_s")
    return _save(figure, axes, path)


def _rss(summary: list[dict[str, Any]], path: Path) -> Path:
    figure, axes = _new_axes(summary, "Peak RSS per worker (max over reps)", "MiB")
    for i, row in enumerate(summary):
        value = row["peak_rss_mib_per_worker_max"]
        if value is None:
            axes.annotate(
                _NOT_MEASURED,
                (i, 0),
                xytext=(0, 4),
                textcoords="offset points",
                ha="center",
                va="bottom",
                rotation=90,
                fontsize=8,
            )
            continue
        axes.bar(i, value, width=0.5, color="tab:purple")
        axes.text(i, value, f"{value:.0f}", ha="center", va="bottom", fontsize=8)
    return _save(figure, axes, path)


def _timeline_case(cases: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The case the timeline shows: the first scripted 2x4 repetition (the cell
    the per-wave overhead was measured on), else the scripted case with most slots."""
    scripted = [c for c in cases if c["case"].get("harness", "scripted") == "scripted"]
    with_timeline = [c for c in scripted if c.get("timeline")]
    for case in with_timeline:
        if (case["case"]["workers"], case["case"]["slots"]) == (2, 4):
            return case
    return max(
        with_timeline,
        key=lambda c: c["case"]["workers"] * c["case"]["slots"],
        default=None,
    )


def _timeline_section(cases: list[dict[str, Any]]) -> list[str]:
    case = _timeline_case(cases)
    if case is None:
        return []
    warm = case["phases"]["warm"] or {}
    return [
        f"### Per-turn timeline: {case['case']['label']}, warm burst",
        "",
        "Each bar is one turn, from its start to its finish (database clock), one row per slot "
        "chain; the thin line before it is the wait since its enqueue. A freed slot's next "
        "turn starts in the statement that finished the last one, so the bars of one row "
        "touch: the handoff (finish to next start, while work waits) was "
        f"{_one(warm.get('handoff_p50_ms'), 1, ' ms')} at the median and "
        f"{_one(warm.get('handoff_p95_ms'), 1, ' ms')} at p95.",
        "",
        "![Per-turn timeline](timeline.png)",
        "",
    ]


def _chains(turns: list[list[float]]) -> list[list[list[float]]]:
    """Turns laid out in rows: each row a chain of turns a slot ran back to back."""
    rows: list[list[list[float]]] = []
    for turn in sorted(turns, key=lambda t: (t[0], t[2])):
        for row in rows:
            if row[-1][0] == turn[0] and row[-1][3] <= turn[2]:
                row.append(turn)
                break
        else:
            rows.append([turn])
    return rows


def _timeline(cases: list[dict[str, Any]], path: Path) -> Path | None:
    case = _timeline_case(cases)
    if case is None:
        return None
    rows = _chains(case["timeline"])
    figure = Figure(figsize=(10, 0.35 * len(rows) + 1.5))
    axes = figure.add_subplot()
    colours = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
    for y, row in enumerate(rows):
        for worker, enqueued, started, finished in row:
            axes.plot([enqueued, started], [y, y], color="lightgrey", linewidth=1, zorder=1)
            axes.barh(
                y,
                finished - started,
                left=started,
                height=0.6,
                color=colours[int(worker) % len(colours)],
                edgecolor="white",
                zorder=2,
            )
    axes.set_xlabel("ms since the burst's first enqueue (colour: worker)")
    axes.set_ylabel("slot chain")
    axes.set_title(f"Per-turn timeline, {case['case']['label']} (warm burst)")
    figure.savefig(path, bbox_inches="tight")
    return path


def render_charts(matrix: dict[str, Any], out_dir: Path) -> list[Path]:
    """``throughput.png``, ``p95.png``, ``rss.png`` and ``timeline.png`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = matrix["summary"]
    draw = (_throughput, _p95, _rss)
    charts = [chart(summary, out_dir / name) for chart, name in zip(draw, _CHARTS, strict=True)]
    drawn = _timeline(matrix["cases"], out_dir / "timeline.png")
    return charts if drawn is None else [*charts, drawn]


def write_matrix(
    report_dir: Path,
    cases: list[dict[str, Any]],
    *,
    command: str,
    environment: dict[str, Any],
    backend: dict[str, Any],
) -> Path:
    """Write the cases, ``matrix.json``, ``matrix.md`` and the charts; return matrix.json."""
    report_dir.mkdir(parents=True, exist_ok=True)
    for case in cases:
        write_case(report_dir, case)
    matrix = build_matrix(
        cases,
        command=command,
        environment=environment,
        backend=backend,
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    return _write(report_dir, matrix)


def _write(report_dir: Path, matrix: dict[str, Any]) -> Path:
    path = report_dir / "matrix.json"
    _write_json(path, matrix)
    (report_dir / "matrix.md").write_text(render_markdown(matrix))
    render_charts(matrix, report_dir)
    return path


def rerender_matrix(report_dir: Path) -> Path:
    """Rebuild ``matrix.json`` (its summary and sizing), ``matrix.md`` and the charts
    from the cases the existing ``matrix.json`` holds, keeping its time and command:
    after a change to the report code, nothing re-measured."""
    old = json.loads((report_dir / "matrix.json").read_text())
    matrix = build_matrix(
        old["cases"],
        command=old["command"],
        environment=old["environment"],
        backend=old["backend"],
        generated_at=old["generated_at"],
    )
    return _write(report_dir, matrix)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stint.lab.report",
        description="Re-render a matrix report (matrix.json's summary and sizing, matrix.md, "
        "the charts) from the cases its matrix.json holds; nothing is re-measured.",
    )
    parser.add_argument("report_dir", type=Path, metavar="DIR", help="e.g. docs/load")
    args = parser.parse_args(argv)
    print(f"written: {rerender_matrix(args.report_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
