"""``make bench``'s figures beside the last committed run's, each as a ratio.

A bench figure alone says little on a shared machine; beside the figure of the
run committed last (``docs/load/bench/latest.json`` as ``git`` has it at HEAD,
else as the file is on disk) it says which way a change moved it. Ratios are
this run over the last one: above 1 is more (turns/s better, CPU worse).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["FIGURES", "comparison_lines", "last_committed"]

FIGURES = (
    "turns_per_second",
    "cpu_ms_per_turn",
    "postgres_cpu_ms_per_turn",
    "cpu_ceiling_turns_per_second",
    "peak_rss_mib_per_worker",
    "uss_mib_per_worker",
    "statements_per_turn",
    "cpu_x_scripted",
)
"""The figures compared, in the order printed."""


def last_committed(path: Path) -> list[dict[str, Any]]:
    """The results of the run committed at ``path`` (HEAD's copy, else the file's);
    empty when there is none or it cannot be read."""
    text = None
    try:
        shown = subprocess.run(
            ["git", "show", f"HEAD:./{path.name}"],
            cwd=path.parent,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        if shown.returncode == 0:
            text = shown.stdout
    except (OSError, subprocess.SubprocessError):
        text = None
    if text is None and path.exists():
        text = path.read_text()
    if text is None:
        return []
    try:
        results = json.loads(text).get("results", [])
    except (ValueError, AttributeError):
        return []
    return [r for r in results if isinstance(r, dict)]


def comparison_lines(
    now: Sequence[Mapping[str, Any]], before: Sequence[Mapping[str, Any]]
) -> list[str]:
    """One line per configuration and figure: ``1x32 turns_per_second 612.0 (last
    410.2, x1.49)``, ``1x32 agents cpu_ms_per_turn ...``; a configuration the last
    run did not have says so. Results without a harness (schema 1) are the scripted
    fixture's."""
    last = {_key(r): r for r in before}
    lines = []
    for result in now:
        key = _key(result)
        harness, workers, slots = key
        label = f"{workers}x{slots}" + ("" if harness == "scripted" else f" {harness}")
        previous = last.get(key)
        for figure in FIGURES:
            value = result.get(figure)
            if value is None:
                continue
            old = None if previous is None else previous.get(figure)
            if isinstance(old, int | float) and old:
                lines.append(f"{label} {figure} {value} (last {old}, x{value / old:.2f})")
            else:
                lines.append(f"{label} {figure} {value} (no last run)")
    return lines


def _key(result: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return (result.get("harness", "scripted"), result.get("workers"), result.get("slots"))
