"""make bench's comparison with the last committed run."""

from __future__ import annotations

import json
from pathlib import Path

from stint.lab.bench_compare import comparison_lines, last_committed


def _result(workers: int, slots: int, tps: float, cpu: float) -> dict[str, float | int]:
    return {"workers": workers, "slots": slots, "turns_per_second": tps, "cpu_ms_per_turn": cpu}


def test_each_figure_is_printed_beside_the_last_runs_as_a_ratio() -> None:
    lines = comparison_lines([_result(1, 32, 600.0, 0.7)], [_result(1, 32, 400.0, 1.4)])
    assert lines == [
        "1x32 turns_per_second 600.0 (last 400.0, x1.50)",
        "1x32 cpu_ms_per_turn 0.7 (last 1.4, x0.50)",
    ]


def test_a_configuration_the_last_run_lacked_says_so() -> None:
    lines = comparison_lines([_result(2, 4, 300.0, 2.0)], [_result(1, 32, 400.0, 1.4)])
    assert lines == [
        "2x4 turns_per_second 300.0 (no last run)",
        "2x4 cpu_ms_per_turn 2.0 (no last run)",
    ]


def test_the_last_run_is_read_from_the_file_outside_git(tmp_path: Path) -> None:
    path = tmp_path / "latest.json"
    path.write_text(json.dumps({"results": [_result(1, 32, 400.0, 1.4)]}))
    assert last_committed(path) == [_result(1, 32, 400.0, 1.4)]
    assert last_committed(tmp_path / "absent.json") == []
