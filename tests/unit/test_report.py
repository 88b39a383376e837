"""The load report: ranges over reps, nulls kept null, files written, ``stint size`` on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from stint.lab.model import (
    SCHEMA_VERSION,
    Backend,
    CaseReport,
    CaseSpec,
    Costs,
    PhaseFigures,
    Samples,
)
from stint.lab.report import build_matrix, render_markdown, write_case, write_matrix
from stint.lab.sizing_profile import sizing_profile

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
COMMAND = "python -m loadtest.matrix --reps 2 --report-dir /tmp/r"
BACKEND = Backend(
    kind="container",
    postgres_limits={"cpus": 1, "memory": "1GiB"},
    worker_limits="unlimited",
    postgres_version="17.2",
)
ENVIRONMENT = {"python": "3.11.9", "cpus": 4}


def _phase(turns_per_s: float, limit: float, p95: float | None) -> PhaseFigures:
    return PhaseFigures(
        turns=24,
        succeeded=24,
        interval_s=24 / turns_per_s,
        turns_per_s=turns_per_s,
        fraction_of_limit=turns_per_s / limit,
        e2e_p50_s=None if p95 is None else p95 / 2,
        e2e_p95_s=p95,
        e2e_max_s=p95,
        queue_wait_p95_s=None,
    )


def _samples(sum_rss: float, per_worker: list[float], cpu: float, pg: float | None) -> Samples:
    return Samples(
        count=50,
        interval_s=0.1,
        peak_sum_rss_mib=sum_rss,
        peak_rss_mib_per_worker=per_worker,
        peak_uss_mib_per_worker=[v / 2 for v in per_worker],
        worker_cpu_seconds=cpu,
        max_threads_per_worker=8,
        max_fds_per_worker=40,
        max_active_sessions=8,
        db_connections_per_worker=5.0,
        pg_peak_memory_mib=pg,
        pg_oom_kills=0,
    )


def _costs(per_turn: float, *, bound: bool = False) -> Costs:
    return Costs(
        worker_cpu_ms_per_turn=per_turn,
        pg_cpu_ms_per_turn=per_turn / 2,
        idle_worker_cpu_ms_per_s=7.0,
        idle_pg_cpu_ms_per_s=4.0,
        busy_worker_cpu_ms_per_s=5.0,
        wait_worker_cpu_ms_per_slot_s=-0.5,
        hold_busy_slots=8,
        host_cpu_busy=0.95 if bound else 0.5,
        cpu_ceiling_turns_per_s=400.0,
        cpu_bound=bound,
        load_average=[1.5, 1.0, 0.5],
        cpu_ceiling_fraction=per_turn / 50,
    )


def _checks(*failed: str) -> list[dict[str, Any]]:
    names = ("no_duplicate_effects", "no_lost_turns")
    return [{"name": n, "passed": n not in failed, "evidence": {}} for n in names]


def _case(
    spec: CaseSpec,
    *,
    warm: tuple[float, float | None] | None,
    cold: tuple[float, float | None] | None,
    samples: Samples | None,
    idle: float | None,
    failed: tuple[str, ...] = (),
    costs: Costs | None = None,
) -> dict[str, Any]:
    limit = spec.physical_limit
    return CaseReport(
        spec=spec,
        backend=BACKEND,
        environment=ENVIRONMENT,
        configuration={"poll_interval": 0.25},
        cold=_phase(cold[0], limit, cold[1]) if cold else None,
        warm=_phase(warm[0], limit, warm[1]) if warm else None,
        samples=samples,
        costs=costs,
        idle_drain_s=idle,
        worker_exit_codes=[0] * spec.workers,
        checks=_checks(*failed),
    ).as_json()


def _cases() -> list[dict[str, Any]]:
    """2 x 4 twice (ranges; one p95 missing) and 1 x 1 once (nothing sampled, a failed check)."""
    return [
        _case(
            CaseSpec(2, 4, 24, 250, rep=1),
            warm=(16.0, 3.36),
            cold=(6.77, 3.5),
            samples=_samples(442.4, [220.0, 222.4], 3.88, 114.0),
            idle=0.07,
            costs=_costs(2.5),
        ),
        _case(
            CaseSpec(1, 1, 24, 250, rep=1),
            warm=None,
            cold=(1.42, 16.03),
            samples=None,
            idle=None,
            failed=("no_lost_turns",),
        ),
        _case(
            CaseSpec(2, 4, 24, 250, rep=2),
            warm=(20.0, None),
            cold=(6.98, 3.45),
            samples=_samples(449.0, [230.0, 219.0], 4.19, None),
            idle=0.51,
            costs=_costs(3.0, bound=True),
        ),
    ]


def _matrix() -> dict[str, Any]:
    return build_matrix(
        _cases(),
        command=COMMAND,
        environment=ENVIRONMENT,
        backend=asdict(BACKEND),
        generated_at="2026-10-12T10:00:00+00:00",
    )


def test_summary_rows_group_reps_and_order_by_total_slots() -> None:
    matrix = _matrix()
    assert matrix["schema_version"] == SCHEMA_VERSION
    assert matrix["command"] == COMMAND
    assert len(matrix["cases"]) == 3
    assert [(r["workers"], r["slots"], r["reps"]) for r in matrix["summary"]] == [
        (1, 1, 1),
        (2, 4, 2),
    ]


def test_ranges_are_min_max_over_reps_and_skip_nulls() -> None:
    row = _matrix()["summary"][1]
    assert row["total_slots"] == 8
    assert row["physical_limit_turns_per_s"] == pytest.approx(32.0)  # 24 / (3 waves x 0.25 s)
    assert row["warm"]["turns_per_s"] == [16.0, 20.0]
    assert row["warm"]["fraction_of_limit"] == pytest.approx([0.5, 0.625])
    assert row["warm"]["e2e_p95_s"] == [3.36, 3.36]  # rep 2 measured none: skipped, not zero
    assert row["cold"]["turns_per_s"] == [6.77, 6.98]
    assert row["cold"]["e2e_p95_s"] == [3.45, 3.5]
    assert row["peak_sum_rss_mib"] == [442.4, 449.0]
    assert row["peak_rss_mib_per_worker_max"] == 230.0
    assert row["peak_uss_mib_per_worker_max"] == 115.0
    assert row["worker_cpu_seconds"] == [3.88, 4.19]
    assert row["idle_drain_s"] == [0.07, 0.51]
    assert row["pg_peak_memory_mib_max"] == 114.0
    assert row["db_connections_per_worker_max"] == 5.0
    assert (row["passed_reps"], row["all_checks_passed"]) == (2, True)


def test_unmeasured_figures_stay_null() -> None:
    row = _matrix()["summary"][0]
    assert row["warm"] == {
        "turns_per_s": None,
        "fraction_of_limit": None,
        "e2e_p95_s": None,
        "handoff_p95_ms": None,
        "claim_p95_ms": None,
    }
    assert row["cold"]["turns_per_s"] == [1.42, 1.42]
    for key in (
        "peak_sum_rss_mib",
        "peak_rss_mib_per_worker_max",
        "peak_uss_mib_per_worker_max",
        "worker_cpu_seconds",
        "idle_drain_s",
        "pg_peak_memory_mib_max",
        "db_connections_per_worker_max",
    ):
        assert row[key] is None, key
    assert (row["passed_reps"], row["all_checks_passed"]) == (0, False)


def test_costs_are_ranges_over_reps_and_count_the_cpu_bound_ones() -> None:
    row = _matrix()["summary"][1]
    costs = row["costs"]
    assert costs["worker_cpu_ms_per_turn"] == [2.5, 3.0]
    assert costs["pg_cpu_ms_per_turn"] == [1.25, 1.5]
    assert costs["wait_worker_cpu_ms_per_slot_s"] == [-0.5, -0.5]
    assert costs["host_cpu_busy"] == [0.5, 0.95]
    assert costs["cpu_ceiling_turns_per_s"] == [400.0, 400.0]
    assert costs["cpu_ceiling_fraction"] == [0.05, 0.06]
    assert (costs["cpu_bound_reps"], costs["load_average_1m"]) == (1, [1.5, 1.5])
    assert row["peak_rss_mib_per_worker"] == [222.4, 230.0]
    assert row["db_connections_per_worker"] == [5.0, 5.0]
    # A case that measured no costs (schema 1, or a failed case) leaves them null.
    assert _matrix()["summary"][0]["costs"]["worker_cpu_ms_per_turn"] is None


def test_sizing_is_the_profile_of_the_summary_from_passed_configurations() -> None:
    matrix = _matrix()
    assert matrix["sizing"] == sizing_profile(
        matrix["summary"], environment=ENVIRONMENT, backend=asdict(BACKEND)
    )
    scripted = matrix["sizing"]["harnesses"]["scripted"]
    assert [c["configuration"] for c in scripted["configurations"]] == [
        "1 \N{MULTIPLICATION SIGN} 1, 24 sessions, 250 ms tool wait",
        "2 \N{MULTIPLICATION SIGN} 4, 24 sessions, 250 ms tool wait",
    ]
    # 1 x 1 failed a check: the ranges come from 2 x 4 alone.
    assert scripted["configurations_failed"] == [scripted["configurations"][0]["configuration"]]
    assert scripted["costs"]["worker_cpu_ms_per_turn"] == [2.5, 3.0]
    assert scripted["max_slots_measured"] == 4
    assert scripted["cpu_bound"] == [
        {
            "configuration": "2 \N{MULTIPLICATION SIGN} 4, 24 sessions, 250 ms tool wait",
            "reps": 1,
            "of": 2,
            "host_cpu_busy": [0.5, 0.95],
        }
    ]
    # One slot count measured: no line to fit, so no per-slot memory to size from.
    assert scripted["memory"] is None


def test_markdown_has_the_seed_table_ranges_and_command() -> None:
    text = render_markdown(_matrix())
    assert (
        "| Workers \N{MULTIPLICATION SIGN} slots each | Sessions | Tool wait "
        "| Completed turns/s (warm) | Completed turns/s (cold) | Fraction of limit (warm) "
        "| End-to-end p95 (warm) | Handoff p95 (warm) | Peak sum worker RSS | Worker CPU-s "
        "| Worker CPU ms/turn (warm) | PostgreSQL CPU ms/turn (warm) | CPU ceiling turns/s "
        "| Fraction of the CPU ceiling (warm) |"
    ) in text
    row = next(
        line
        for line in text.splitlines()
        if line.startswith("| 2 \N{MULTIPLICATION SIGN} 4 | 24 |")
    )
    assert row == (
        "| 2 \N{MULTIPLICATION SIGN} 4 | 24 | 250ms | 16.00\N{EN DASH}20.00 "
        "| 6.77\N{EN DASH}6.98 | 0.50\N{EN DASH}0.62 | 3.36s | not measured "
        "| 442\N{EN DASH}449MiB | 3.88\N{EN DASH}4.19 "
        "| 2.50\N{EN DASH}3.00 | 1.25\N{EN DASH}1.50 | 400 | 0.05\N{EN DASH}0.06 |"
    )
    assert COMMAND in text
    assert "2026-10-12T10:00:00+00:00" in text
    assert "1 \N{MULTIPLICATION SIGN} 1 | 24 | 250ms | not measured | 1.42 |" in text
    assert "2 of 3 cases passed all checks" in text
    assert "no_duplicate_effects 3/3" in text
    assert "no_lost_turns 2/3" in text
    assert "Worker limits: unlimited" in text
    assert "cpus 1, memory 1GiB" in text
    assert "## Costs for sizing" in text
    assert "(throughput.png)" in text
    assert "(cases/)" in text
    assert "not confidence intervals" in text


def test_write_case_names_the_file_by_label(tmp_path: Path) -> None:
    case = _cases()[0]
    path = write_case(tmp_path, case)
    assert path == tmp_path / "cases" / "2x4-24s-250ms-r1.json"
    assert json.loads(path.read_text()) == case


def test_write_matrix_writes_json_markdown_charts_and_cases(tmp_path: Path) -> None:
    report_dir = tmp_path / "report"
    cases = _cases()
    path = write_matrix(
        report_dir,
        cases,
        command=COMMAND,
        environment=ENVIRONMENT,
        backend=asdict(BACKEND),
    )
    assert path == report_dir / "matrix.json"
    written = json.loads(path.read_text())
    assert written["summary"] == _matrix()["summary"]
    assert written["cases"] == cases
    assert (
        "| Workers \N{MULTIPLICATION SIGN} slots each |" in (report_dir / "matrix.md").read_text()
    )
    for name in ("throughput.png", "p95.png", "rss.png"):
        data = (report_dir / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        assert len(data) > 1000, name
    assert sorted(p.name for p in (report_dir / "cases").iterdir()) == [
        "1x1-24s-250ms-r1.json",
        "2x4-24s-250ms-r1.json",
        "2x4-24s-250ms-r2.json",
    ]


def _stint(*args: str) -> subprocess.CompletedProcess[str]:
    # A database URL nothing listens on: `stint size` must not try to reach it.
    env = {**os.environ, "STINT_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    return subprocess.run(
        [sys.executable, "-m", "stint.ops.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def matrix_json(tmp_path: Path) -> Path:
    """The three cases, and a 1 x 2 that passed: two slot counts to fit memory on."""
    two = _case(
        CaseSpec(1, 2, 24, 250, rep=1),
        warm=(7.5, 3.4),
        cold=(5.0, 4.0),
        samples=_samples(220.0, [220.0], 2.0, 100.0),
        idle=0.1,
        costs=_costs(2.0),
    )
    return write_matrix(
        tmp_path,
        [*_cases(), two],
        command=COMMAND,
        environment=ENVIRONMENT,
        backend=asdict(BACKEND),
    )


def test_stint_size_prints_the_recommendation_its_rule_and_the_options(matrix_json: Path) -> None:
    # 10 busy slots; Erlang C asks for more than 30 % headroom does. The report measured
    # at most 4 slots per worker (the cap), and a worker of ~230 MiB needs --worker-memory-mib.
    result = _stint(
        "size",
        *("--report", str(matrix_json), "--rate", "1", "--turn-seconds", "10"),
        *("--worker-memory-mib", "512"),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        "1 turns/s \N{MULTIPLICATION SIGN} 10 s = 10 busy slots (Little's law); 19 needed: "
        "19 for at most 1% of turns to wait for a slot (Erlang C), more than the 13 with 30% "
        "headroom."
    )
    assert lines[2] == (
        "Recommended: 6 workers \N{MULTIPLICATION SIGN} 4 slots (24 slots; 20 with one worker lost)"
    )
    assert "at most 4 slots per worker, each within 50% of 1 CPU and 512 MiB" in lines[3]
    assert "- worker CPU: 2.00\N{EN DASH}3.00 ms per turn" in result.stdout
    assert "was CPU-bound in 2 \N{MULTIPLICATION SIGN} 4, 24 sessions" in result.stdout
    assert f"Report: {matrix_json}" in result.stdout


def test_stint_size_json(matrix_json: Path) -> None:
    result = _stint(
        "size",
        *("--report", str(matrix_json), "--rate", "2", "--turn-seconds", "1"),
        *("--slots-per-worker", "1", "--spare-workers", "0", "--json"),
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["report"] == str(matrix_json)
    assert answer["slots"]["busy"] == 2
    # The forced 1-slot workers do not fit the default 128 MiB: said, not recommended.
    assert answer["recommended"] is None
    first = answer["options"][0]
    assert (first["slots_per_worker"], first["workers"]) == (1, answer["slots"]["needed"])
    assert any("above its 128 MiB" in why for why in first["why_not"])
    assert answer["costs"]["figures"]["worker_cpu_ms_per_turn"] == [2.0, 3.0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no report at"),
        ("", "cannot read"),
        ("{not json", "is not JSON"),
        ('{"cases": []}', "is not a load-test matrix report"),
        ('{"summary": [], "sizing": {"configurations": []}}', "it predates per-turn costs"),
    ],
)
def test_stint_size_bad_report_exits_2_with_one_line(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "matrix.json"
    if content == "":
        path.mkdir()  # a folder: unreadable as a file
    elif content is not None:
        path.write_text(content)
    result = _stint("size", "--report", str(path), "--rate", "1", "--turn-seconds", "1")
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


def test_stint_size_bad_numbers_exit_2(matrix_json: Path) -> None:
    result = _stint("size", "--report", str(matrix_json), "--rate", "0", "--turn-seconds", "1")
    assert result.returncode == 2
    assert result.stderr.strip() == "stint size: rate must be a positive number, not 0.0"
    result = _stint(
        "size",
        *("--report", str(matrix_json), "--rate", "1", "--turn-seconds", "1"),
        *("--cpu-per-turn-ms", "-3"),
    )
    assert result.returncode == 2
    assert "CPU per turn must be a positive number of ms, not -3.0" in result.stderr


def test_a_turn_started_as_another_finished_does_not_overlap_it() -> None:
    """One statement finishes a turn and starts the slot's next at one instant."""
    from stint.lab.figures import max_concurrent_turns
    from stint.store.models import TurnTiming
    from stint.store.vocabulary import TurnStatus

    def timing(start: float, finish: float) -> TurnTiming:
        return TurnTiming(
            start - 0.5,
            start,
            finish,
            finish - start + 0.5,
            0.1,
            finish - start,
            TurnStatus.SUCCEEDED,
            1,
        )

    instant = 1764585633.206972
    chained = [timing(1764585633.105049, instant), timing(instant, 1764585633.271009)]
    assert max_concurrent_turns(chained) == 1
    assert max_concurrent_turns([*chained, timing(1764585633.2, 1764585633.3)]) == 2


def test_the_ladder_slope_is_least_squares_and_null_without_two_points() -> None:
    from stint.lab.ladder import Rung, marginal

    def rung(slots: int, rss: float | None) -> Rung:
        return Rung(1, slots, rss, None, None, None, None, True)

    assert marginal([rung(1, 50.0), rung(2, 50.5), rung(4, 51.5)], "slots") == 0.5
    assert marginal([rung(1, 50.0)], "slots") is None
    assert marginal([rung(1, None), rung(2, None)], "slots") is None
