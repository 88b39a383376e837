"""The import cost table: every step of the worker's imports measured, in order."""

from __future__ import annotations

from pathlib import Path

from stint.lab.import_cost import STEPS, main


def test_the_table_has_a_row_per_import_and_adds_up(tmp_path: Path) -> None:
    out = tmp_path / "imports.md"
    assert main(["--output", str(out)]) == 0
    rows = [line.split(" | ") for line in out.read_text().splitlines() if line.startswith("| `")]
    assert [row[0].strip("| `") for row in rows] == ["python", *(m for m, _ in STEPS)]
    added = [float(row[2]) for row in rows]
    totals = [float(row[3].rstrip(" |")) for row in rows]
    assert abs(sum(added) - totals[-1]) < 0.1 * len(rows)  # each row is rounded once
    assert totals[-1] > totals[0]
