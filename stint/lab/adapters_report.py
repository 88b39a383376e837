"""``docs/load/adapters.md``: the adapters' load rows beside the scripted and agents rows.

Reads the case JSON a matrix run wrote (``pytest loadtest/test_matrix.py --run-load
--matrix 1x4,2x4 --report-dir DIR``) and renders, per harness and cell: reps
passed, warm turns/s and fraction of the physical limit, worker CPU per turn and
peak RSS per worker, and each agent loop's CPU per turn as a multiple of
``stint.agents:chat``'s. A worker's CPU-seconds cover its whole life, start-up
included, so the page also measures what loading each harness costs a fresh
interpreter (the import of its framework) and reports CPU per turn with that
subtracted. ``python -m stint.lab.adapters_report DIR OUT``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["main", "render"]

_X = "\N{MULTIPLICATION SIGN}"
_DASH = "\N{EN DASH}"
_LOADS = {
    "scripted": "stint.worker.scripted:harness",
    "agents": "stint.agents:chat",
    "openai-agents": "stint.lab.load_agents:openai_agents",
    "pydantic-ai": "stint.lab.load_agents:pydantic_ai",
}
_PROBE = """
import resource, sys
from pathlib import Path
from stint.config.settings import load_settings
from stint.worker.harness import load_harness
import stint.worker.main
before = resource.getrusage(resource.RUSAGE_SELF)
settings = load_settings(model="m", model_base_url="http://127.0.0.1:9/v1")
load_harness(sys.argv[1], workspace=Path(sys.argv[2]), settings=settings)
after = resource.getrusage(resource.RUSAGE_SELF)
print(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
"""


def load_cost(harness: str, workspace: Path, runs: int = 3) -> float:
    """CPU-seconds a fresh interpreter spends loading ``harness`` (the least of ``runs``)."""
    costs = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", _PROBE, harness, str(workspace)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        costs.append(float(out.stdout.strip()))
    return min(costs)


def render(cases: list[dict[str, Any]], loads: dict[str, float], *, command: str) -> str:
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = defaultdict(list)
    for case in cases:
        spec = case["case"]
        groups[(spec.get("harness", "scripted"), spec["workers"], spec["slots"])].append(case)
    order = list(_LOADS)
    rows: list[dict[str, str]] = []
    keys: list[tuple[str, int, int]] = []
    per_turn: dict[tuple[str, int, int], float] = {}
    for key in sorted(groups, key=lambda k: (k[1], k[2], order.index(k[0]))):
        harness, workers, slots = key
        reps = groups[key]
        turns = [sum(p["turns"] for p in c["phases"].values() if p) for c in reps]
        cpu = [c["samples"]["worker_cpu_seconds"] for c in reps]
        net = [(s - workers * loads.get(harness, 0.0)) / n for s, n in zip(cpu, turns, strict=True)]
        per_turn[key] = sum(net) / len(net)
        warm = [c["phases"]["warm"] for c in reps]
        rss = max(max(c["samples"]["peak_rss_mib_per_worker"]) for c in reps)
        rows.append(
            {
                "harness": harness,
                "cell": f"{workers} {_X} {slots}",
                "passed": f"{sum(bool(c['passed']) for c in reps)}/{len(reps)}",
                "turns_per_s": _span([w["turns_per_s"] for w in warm], 2),
                "fraction": _span([w["fraction_of_limit"] for w in warm], 2),
                "cpu_turn_ms": _span([1000 * s / n for s, n in zip(cpu, turns, strict=True)], 1),
                "net_turn_ms": _span([1000 * x for x in net], 1),
                "rss": f"{rss:.0f}MiB",
            }
        )
        keys.append(key)
    lines = [
        "# The adapters under load, beside the scripted fixture and `stint.agents:chat`",
        "",
        f"Generated {datetime.now(UTC).isoformat(timespec='seconds')} by:",
        "",
        "```",
        command,
        "```",
        "",
        "Each agent turn (the agents harness, and each adapter's load agent in "
        "`stint.lab.load_agents`) is a model call asking for the `note` tool, the tool, and a "
        "model call for the reply, against the fake provider with 250 ms before each first "
        "token; the scripted turn waits 250 ms. 24 sessions, a cold burst then a warm one; "
        f"ranges are the minimum{_DASH}maximum over the repetitions. Worker CPU per turn is the "
        "workers' CPU-seconds over the turns of both bursts; *net of loading* subtracts what "
        "loading the harness costs a fresh interpreter (below), once per worker. The ratio is "
        "the net CPU per turn over `stint.agents:chat`'s in the same cell (goal: at most 1.5).",
        "",
        f"| Harness | Workers {_X} slots | Reps passed | Turns/s (warm) | Fraction of limit (warm) "
        f"| Worker CPU per turn | Net of loading | {_X} agents | Peak RSS per worker |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row, key in zip(rows, keys, strict=True):
        harness, workers, slots = key
        base = per_turn.get(("agents", workers, slots))
        ratio = "-" if base is None or harness == "scripted" else f"{per_turn[key] / base:.2f}"
        lines.append(
            f"| {row['harness']} | {row['cell']} | {row['passed']} | {row['turns_per_s']} "
            f"| {row['fraction']} | {row['cpu_turn_ms']}ms | {row['net_turn_ms']}ms | {ratio} "
            f"| {row['rss']} |"
        )
    lines += [
        "",
        "CPU-seconds a fresh interpreter spends loading each harness (its framework's import "
        "included; the least of three):",
        "",
        "| Harness | Load CPU |",
        "|---|---|",
        *(f"| {name} | {loads[name]:.2f}s |" for name in order if name in loads),
    ]
    return "\n".join(lines) + "\n"


def _span(values: list[float], digits: int) -> str:
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}{_DASH}{high}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report_dir", type=Path, help="the matrix run's --report-dir")
    parser.add_argument("out", type=Path, help="the Markdown page to write")
    parser.add_argument("--command", default="", help="the matrix command, for the page")
    parser.add_argument("--note", default="", help="a line to add (e.g. the load average)")
    args = parser.parse_args(argv)
    cases = [json.loads(p.read_text()) for p in sorted((args.report_dir / "cases").glob("*.json"))]
    workspace = args.report_dir / "load-probe"
    workspace.mkdir(exist_ok=True)
    loads = {name: load_cost(spec, workspace) for name, spec in _LOADS.items()}
    page = render(cases, loads, command=args.command or "pytest loadtest/test_matrix.py ...")
    if args.note:
        page += f"\n{args.note}\n"
    args.out.write_text(page)
    print(f"wrote {args.out} from {len(cases)} cases ({os.fspath(args.report_dir)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
