"""docs/load/delegation.json and .md: the delegation benchmark's report.

Three parts, each written by its own load test and stamped with its own
command, date, machine and load (``cases``: one parent and 64 children, batched
and one statement per child; ``trees``: two levels, 1,000 sessions and more;
``ladder``: the marginal RSS per concurrent child). A run of one part keeps the
others as the file holds them; the Markdown is rendered from the JSON alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stint.lab.delegation import DelegationResult
from stint.lab.fit import least_squares_slope

__all__ = ["PARTS", "marginal_rss_per_child", "render_delegation", "update_delegation"]

SCHEMA = 2
PARTS = ("cases", "trees", "ladder")


def marginal_rss_per_child(ladder: list[dict[str, Any]]) -> float | None:
    """MiB of the workers' peak sum RSS per extra concurrent child (least squares)."""
    points = [(float(r["case"]["children"]), float(r["peak_sum_rss_mib"])) for r in ladder]
    slope = least_squares_slope(points)
    return None if slope is None else round(slope, 3)


def update_delegation(
    out_dir: Path,
    part: str,
    results: list[DelegationResult],
    *,
    command: str,
    generated_at: str,
    environment: dict[str, Any],
) -> Path:
    """Replace ``part`` of delegation.json with these results, then render delegation.md."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, not {part!r}")
    path = out_dir / "delegation.json"
    data: dict[str, Any] = {"schema": SCHEMA, "parts": {}}
    if path.exists():
        found = json.loads(path.read_text())
        if found.get("schema") == SCHEMA:
            data = found
    data["seed"] = {"pixir_mib_per_child": 6.5, "process_per_worker_mib_per_child": 96.8}
    data["parts"][part] = {
        "generated_at": generated_at,
        "command": command,
        "environment": environment,
        "results": [r.as_json() for r in results],
    }
    if part == "ladder":
        data["parts"][part]["marginal_rss_mib_per_concurrent_child"] = marginal_rss_per_child(
            data["parts"][part]["results"]
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    md = out_dir / "delegation.md"
    md.write_text(render_delegation(data))
    return md


def _stamp(part: dict[str, Any]) -> list[str]:
    loads = sorted({r["load_1m"] for r in part["results"] if r.get("load_1m") is not None})
    load = f"{loads[0]}-{loads[-1]}" if len(loads) > 1 else (str(loads[0]) if loads else "?")
    return [
        f"Generated {part['generated_at']} by `{part['command']}` on "
        f"{part['environment'].get('cpus')} CPUs shared with other work (1-minute load "
        f"average {load} as the cases began); figures are one run.",
        "",
    ]


def _rss(r: dict[str, Any]) -> str:
    return ", ".join(f"{p}" for p in r["peak_rss_mib_per_worker"])


def _levels(r: dict[str, Any]) -> str:
    return "; ".join(
        f"L{lv['level']} {lv['succeeded']}/{lv['spawned']} ok, {lv['ended']} ended"
        for lv in r["levels"]
    )


def _how(r: dict[str, Any]) -> str:
    one = r["case"].get("spawn") == "one"
    return "one statement per child" if one else "one statement per parent"


def _row(r: dict[str, Any]) -> str:
    c = r["case"]
    checks = "pass" if r["checks_passed"] else "FAIL: " + ", ".join(r["failed_checks"])
    cpu = "n/a" if r["postgres_cpu_s"] is None else f"{r['postgres_cpu_s']} s"
    nodes = c["children"] + c["children"] * c.get("grandchildren", 0)
    return (
        f"| {_case(r)} | {r['completed']}/{nodes} "
        f"({_levels(r)}) | {r['parent_status']} | {r['end_to_end_s']} s | {r['ideal_s']} s "
        f"| {r['peak_running_children']} | {r['parent_held_slot_while_joining']} "
        f"| {_rss(r)} MiB | {r['peak_sum_rss_mib']} MiB | {cpu} | {checks} |"
    )


def _phases(results: list[dict[str, Any]]) -> list[str]:
    """Where end-to-end went, per case (seconds from the root's enqueue)."""
    lines = [
        "",
        "Where the time went (seconds from the root's enqueue, database clock): the root's",
        "spawns done (its last `child.started`), the first and the last claim of a",
        "descendant's turn, the last end of one, then the root's tail (the report, the",
        "wake, the claim and the replay of the root up to its finish); last, end-to-end",
        "minus the ideal over the leaf waves (ideal / leaf duration).",
        "",
        "| case | spawns done | first child claimed | last child claimed | last child ended "
        "| root's tail | above the ideal per leaf wave |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ph = r.get("phases") or {}
        cells = [
            ph.get(k)
            for k in ("spawned_s", "first_start_s", "last_start_s", "last_end_s", "root_tail_s")
        ]
        waves = r["ideal_s"] / (r["case"]["child_ms"] / 1000)
        over = (
            None
            if r["end_to_end_s"] is None
            else round((r["end_to_end_s"] - r["ideal_s"]) / waves, 3)
        )
        cells.append(over)
        lines.append(
            f"| {_case(r)} | " + " | ".join("n/a" if v is None else f"{v} s" for v in cells) + " |"
        )
    return lines


def _case(r: dict[str, Any]) -> str:
    c = r["case"]
    shape = f"{c['children']}" + (f" x {c['grandchildren']}" if c.get("grandchildren") else "")
    return f"{c['workers']}x{c['slots']}, {shape} of {c['child_ms']} ms, {_how(r)}"


_HEAD = [
    "| case | completed (per level) | root | end-to-end | ideal | most running at once "
    "| a joining parent held a slot (samples) | peak RSS per worker | peak sum RSS "
    "| PostgreSQL CPU | stint check |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
]


def render_delegation(data: dict[str, Any]) -> str:
    """The Markdown page, from the JSON only."""
    parts = data["parts"]
    lines = [
        "# Delegation: one parent, many children; a tree of a thousand",
        "",
        "Made by `pytest loadtest --run-load -k delegation` (each part below by its own",
        "test: `-k one_parent`, `-k tree`, `-k ladder`). A parent turn spawns its children",
        "(`ctx.spawn_many`: one fenced statement for all of them; or, for the before figure,",
        "`ctx.spawn` once per child) and joins them (`ctx.join`), waiting slot-free; each",
        "leaf is a session with one scripted turn (one journaled effect, then its wait).",
        "End-to-end is the root turn's enqueue to finish (database clock); the ideal is",
        "leaf waves x leaf duration with every slot of the fleet running leaves (the",
        "parents above them have no wait of their own and hold no slot while they join).",
        "PostgreSQL CPU is the server's processes' CPU time from the root's enqueue to its",
        "end (the sampler's own queries, 20 a second, included). `stint check` runs on",
        "the database and journals after the workers stopped.",
        "",
    ]
    if "cases" in parts:
        lines += ["## One parent, 64 children", "", *_stamp(parts["cases"]), *_HEAD]
        lines += [_row(r) for r in parts["cases"]["results"]]
        lines += _phases(parts["cases"]["results"])
        lines += [
            "",
            "The parent runs while it spawns and holds no slot from its join on (the",
            "samples column: none is the claim). Spawned one statement per child, the spawns",
            "take seconds (a round trip and a commit each, one after another), children start",
            "while later ones are still being spawned, and fewer than the fleet's slots run",
            "at once; `spawn_many` writes all 64 children, their turns and steps in one",
            "statement and one commit, so the spawns are done before the first child is",
            "claimed. What is left above the ideal is the claims' spread over the workers",
            "(NOTIFY, then each claimer's next claim), the children's finishes and the",
            "root's tail, on a machine that other work shares.",
            "",
        ]
    if "trees" in parts:
        lines += ["## A tree: children that delegate in turn", "", *_stamp(parts["trees"])]
        lines += [*_HEAD, *(_row(r) for r in parts["trees"]["results"])]
        lines += _phases(parts["trees"]["results"])
        lines += [
            "",
            "The root spawns K children in one statement and joins them; each child spawns",
            "its M grandchildren in one statement and joins them; only the K x M leaves",
            "wait. Every parent (root and children) waits slot-free, so the fleet's slots",
            "go to the leaves; a parent wakes once, when its last child's end is reported.",
            "The ideal counts leaf waves only: the K children run for an effect each and",
            "then wait slot-free, so above the ideal are the waves' claims and finishes",
            "(the last column above) and the wakes of the K parents and the root.",
            "",
        ]
    if "ladder" in parts:
        ladder = parts["ladder"]
        per_child = ladder.get("marginal_rss_mib_per_concurrent_child")
        lines += [
            "## Marginal RSS per concurrent child",
            "",
            *_stamp(ladder),
            "One worker with 64 slots; N children at once (each waits long enough that all N",
            "run together), three repetitions per N; the slope of the workers' peak RSS over N:",
            "",
            f"**{per_child} MiB per concurrent child** (the seed: Pixir 6.5 MiB, process per",
            "worker 96.8 MiB). A child here is a session row, a turn and a slot's task in one",
            "worker process, not a process or an agent runtime of its own.",
            "",
            "| children at once | peak RSS | completed | end-to-end |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['case']['children']} | {r['peak_sum_rss_mib']} MiB "
            f"| {r['completed']}/{r['case']['children']} | {r['end_to_end_s']} s |"
            for r in ladder["results"]
        ]
        lines.append("")
    lines += ["Full figures: [delegation.json](delegation.json).", ""]
    return "\n".join(lines)
