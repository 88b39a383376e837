"""make bench's comparison with the last committed run."""

from __future__ import annotations

import json
from pathlib import Path

from stint.lab.bench import BenchResult, with_ratios
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


def test_an_agents_result_is_compared_with_the_last_agents_result_not_the_scripted() -> None:
    agents = {**_result(1, 32, 200.0, 2.0), "harness": "agents"}
    last_agents = {**_result(1, 32, 100.0, 4.0), "harness": "agents"}
    lines = comparison_lines([agents], [_result(1, 32, 400.0, 1.0), last_agents])
    assert lines == [
        "1x32 agents turns_per_second 200.0 (last 100.0, x2.00)",
        "1x32 agents cpu_ms_per_turn 2.0 (last 4.0, x0.50)",
    ]


def _bench(harness: str, workers: int, slots: int, cpu: float) -> BenchResult:
    return BenchResult(
        harness=harness,
        workers=workers,
        slots=slots,
        turns=100,
        turns_per_second=1.0,
        cpu_ms_per_turn=cpu,
        postgres_cpu_ms_per_turn=1.0,
        cpu_ceiling_turns_per_second=1.0,
        peak_rss_mib_per_worker=1.0,
        uss_mib_per_worker=1.0,
        statements_per_turn=1.0,
        failed_turns=0,
        pool_borrows_waited=0.0,
        pool_wait_ms_per_turn=0.0,
    )


def test_an_agents_result_gets_its_cpu_over_the_scripted_fixtures_of_the_same_shape() -> None:
    results = with_ratios(
        [
            _bench("scripted", 1, 32, 0.8),
            _bench("scripted", 2, 4, 1.6),
            _bench("agents", 1, 32, 2.0),
            _bench("agents", 4, 4, 2.0),
        ]
    )
    assert [r.cpu_x_scripted for r in results] == [None, None, 2.5, None]
