"""Sizing arithmetic: operators deploy what this says, so every rule is pinned here."""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Any

import pytest

from stint.ops.sizing import Budget, Workload, size
from stint.ops.sizing_costs import CostModel, CostPoint, Range, SizingError, cost_model
from stint.ops.sizing_slots import erlang_c, slots_needed

_X = "\N{MULTIPLICATION SIGN}"


def _model(**ranges: tuple[float, float] | None) -> CostModel:
    """A cost model: cheap defaults (a 50 MiB worker, 3 connections), any figure overridden."""
    figures: dict[str, Range | None] = {
        "worker_cpu_ms_per_turn": Range(2.0, 3.0),
        "idle_worker_cpu_ms_per_s": Range(6.0, 8.0),
        "busy_worker_cpu_ms_per_s": Range(3.0, 8.0),
        "wait_worker_cpu_ms_per_slot_s": Range(-1.0, 0.01),
        "pg_cpu_ms_per_turn": Range(1.0, 2.5),
        "idle_pg_cpu_ms_per_s": Range(3.0, 6.0),
        "rss_mib_base": Range(50.0, 52.0),
        "rss_mib_per_slot": Range(0.02, 0.04),
        "db_connections_per_worker": Range(3.0, 3.0),
    }
    for name, value in ranges.items():
        figures[name] = None if value is None else Range(*value)
    return CostModel(
        harness="scripted",
        figures=figures,
        claim_p95_ms=Range(10.0, 40.0),
        max_slots_measured=64,
        harness_max_slots=64,
        slots_measured=[1, 4, 64],
        per_slot_from="fit",
        configurations_used=5,
        configurations_failed=[],
        cpu_bound=[],
        machine_cpus=2,
        generated_at="2026-12-02T00:00:00+00:00",
        command="pytest loadtest --run-load",
    )


# ---- slots needed ---------------------------------------------------------------


def test_busy_slots_are_littles_law_and_headroom_adds_thirty_percent() -> None:
    s = slots_needed(5, 20, headroom=0.3, wait_target=0.01)
    assert (s.busy, s.by_headroom, s.needed, s.rule) == (100, 130, 130, "headroom")
    assert erlang_c(s.by_queueing, 100) <= 0.01 < erlang_c(s.by_queueing - 1, 100)


def test_queueing_decides_small_workloads() -> None:
    # One busy slot on average: 30 % headroom would say 2 slots, where a third of the
    # turns would wait (Erlang C of 2 servers at 1 Erlang is 1/3).
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    s = slots_needed(1, 1, headroom=0.3, wait_target=0.01)
    assert (s.by_headroom, s.rule) == (2, "queueing")
    assert s.needed == s.by_queueing
    assert erlang_c(s.needed, 1.0) <= 0.01 < erlang_c(s.needed - 1, 1.0)


def test_erlang_c_is_one_when_the_slots_cannot_keep_up() -> None:
    assert erlang_c(100, 100.0) == 1.0
    assert erlang_c(1, 0.5) == pytest.approx(0.5)


def test_float_noise_does_not_add_a_slot() -> None:
    assert 3.0 * 30.0 * (1 + 0.1) > 99  # 99.00000000000001 in floats
    assert slots_needed(3.0, 30.0, headroom=0.1, wait_target=0.5).by_headroom == 99


def test_beyond_a_million_busy_slots_is_refused() -> None:
    with pytest.raises(SizingError, match="beyond what this arithmetic is for"):
        size(_model(), Workload(rate=100_000, turn_seconds=20))


# ---- the recommendation -----------------------------------------------------------


def test_five_twenty_second_turns_a_second_take_four_workers_of_44() -> None:
    s = size(_model(), Workload(rate=5, turn_seconds=20))
    assert s.recommended is not None
    assert (s.recommended.workers, s.recommended.slots_per_worker) == (4, 44)
    assert s.recommended.slots_after_one_lost == 132 >= s.slots.needed == 130
    assert s.recommended.db_connections == 12
    assert s.recommended.memory_mib_per_worker == pytest.approx(52 + 44 * 0.04, abs=0.05)
    assert "the fewest workers that still carry 130 slots after losing 1 (N+1)" in s.rule
    assert "at most 64 slots per worker" in s.rule
    assert s.stability.stable


def test_worker_cpu_is_the_survivors_share_at_the_top_of_every_range() -> None:
    s = size(_model(), Workload(rate=5, turn_seconds=20))
    chosen = s.recommended
    assert chosen is not None
    # 3 survivors: background max(idle 8, busy 8) + 5/3 turns/s x 3 ms + 33.3 busy slots x 0.01
    expected = 8.0 + 5 / 3 * 3.0 + 100 / 3 * 0.01
    assert chosen.worker_cpu_ms_per_s == pytest.approx(expected, abs=0.01)
    assert chosen.worker_cpu_share_of_budget == pytest.approx(expected / 1000, abs=1e-4)
    # PostgreSQL: 5 turns/s x 2.5 ms + 4 idle workers' polling x 6 ms/s.
    assert chosen.postgres_cpu_cores == pytest.approx((5 * 2.5 + 4 * 6.0) / 1000, abs=1e-3)
    assert chosen.crash_sessions == chosen.drain_turns == 25  # 100 busy over 4 workers


def test_a_cap_on_slots_per_worker_means_more_workers() -> None:
    s = size(_model(), Workload(rate=5, turn_seconds=20), Budget(max_slots_per_worker=16))
    assert s.recommended is not None
    assert (s.recommended.workers, s.recommended.slots_per_worker) == (10, 15)
    assert "at most 16 slots per worker" in s.rule


def test_no_spare_worker_is_plain_division() -> None:
    s = size(_model(), Workload(rate=5, turn_seconds=20), Budget(spare_workers=0))
    assert s.recommended is not None
    assert (s.recommended.workers, s.recommended.slots_per_worker) == (3, 44)
    assert "with no worker spare" in s.rule


def test_a_costly_harness_is_spread_over_more_workers_by_the_cpu_budget() -> None:
    # 400 ms of CPU per turn: 5 turns/s is 2 CPUs of work; at most 0.5 CPU per worker
    # (with one lost) needs at least 4 survivors, then 5 x 33.
    model = _model().with_figure("worker_cpu_ms_per_turn", 400.0)
    s = size(model, Workload(rate=5, turn_seconds=20))
    assert s.recommended is not None
    survivors = s.recommended.workers - 1
    assert (5 / survivors * 400 + 8 + 0.01 * 100 / survivors) / 1000 <= 0.5
    assert (5 / (survivors - 1) * 400 + 8) / 1000 > 0.5
    assert s.costs["yours"] == {"worker_cpu_ms_per_turn": 400.0}
    assert any("your figure replaces" in note for note in s.notes)


def test_memory_per_slot_bounds_the_slots_a_worker_takes() -> None:
    # 1 MiB per slot and a 100 MiB budget: at most 48 slots per worker.
    model = _model(rss_mib_per_slot=(1.0, 1.0))
    s = size(model, Workload(rate=5, turn_seconds=20), Budget(worker_memory_mib=100))
    assert s.recommended is not None
    assert s.recommended.memory_mib_per_worker <= 100
    assert s.recommended.slots_per_worker <= 48


def test_nothing_fits_says_why() -> None:
    model = _model(rss_mib_base=(200.0, 200.0))
    s = size(model, Workload(rate=5, turn_seconds=20))
    assert s.recommended is None
    assert "no configuration carries 130 slots" in s.rule
    assert all(not o.fits and any("above its 128 MiB" in w for w in o.why_not) for o in s.options)


def test_a_forced_slot_count_is_sized_and_judged() -> None:
    s = size(_model(), Workload(rate=5, turn_seconds=20), Budget(slots_per_worker=4))
    assert s.recommended is not None
    assert (s.recommended.workers, s.recommended.slots_per_worker) == (34, 4)
    assert "4 slots per worker as asked" in s.rule
    too_big = replace(Budget(), slots_per_worker=200, worker_memory_mib=55)
    forced = size(_model(), Workload(rate=5, turn_seconds=20), too_big)
    assert forced.recommended is None
    assert forced.options[0].slots_per_worker == 200 and not forced.options[0].fits


def test_the_options_divide_the_same_slots_into_smaller_workers() -> None:
    s = size(_model(), Workload(rate=5, turn_seconds=20))
    shapes = [(o.workers, o.slots_per_worker, o.recommended) for o in s.options]
    assert shapes == [
        (4, 44, True),
        (6, 32, False),
        (10, 16, False),
        (18, 8, False),
        (34, 4, False),
    ]
    for option in s.options:
        assert option.slots_after_one_lost >= s.slots.needed
        assert option.db_connections == 3 * option.workers
    # Smaller workers: less lost per crash, more memory and connections in all.
    assert [o.crash_sessions for o in s.options] == sorted(
        (o.crash_sessions for o in s.options), reverse=True
    )
    assert [o.memory_mib for o in s.options] == sorted(o.memory_mib for o in s.options)


def test_turns_longer_than_the_drain_budget_are_noted() -> None:
    s = size(_model(), Workload(rate=1, turn_seconds=60), Budget(drain_seconds=30))
    assert any("outlast the 30 s drain budget" in note for note in s.notes)
    short = size(_model(), Workload(rate=1, turn_seconds=20), Budget(drain_seconds=30))
    assert not any("drain budget" in note for note in short.notes)


def test_unmeasured_optional_figures_count_as_zero_and_are_named() -> None:
    model = _model(pg_cpu_ms_per_turn=None, busy_worker_cpu_ms_per_s=None)
    s = size(model, Workload(rate=5, turn_seconds=20))
    assert s.recommended is not None and s.recommended.postgres_cpu_cores is None
    assert any(
        "not measured by the report, counted as zero: busy_worker_cpu_ms_per_s, "
        "pg_cpu_ms_per_turn" in note
        for note in s.notes
    )


def test_beyond_the_measured_slots_is_said_to_be_extrapolated() -> None:
    s = size(_model(), Workload(rate=50, turn_seconds=20), Budget(max_slots_per_worker=256))
    assert s.recommended is not None and s.recommended.slots_per_worker > 64
    assert any("beyond the 64 the report measured" in note for note in s.notes)


# ---- stability --------------------------------------------------------------------


def test_a_budget_inside_a_measured_range_names_the_deciding_figure() -> None:
    # 0.02-0.2 MiB per slot with a 59 MiB budget: at the top a 44-slot worker needs
    # 52 + 8.8 MiB and does not fit (5 x 33 does); at the bottom 4 x 44 does.
    model = _model(rss_mib_base=(51.0, 52.0), rss_mib_per_slot=(0.02, 0.2))
    s = size(model, Workload(rate=5, turn_seconds=20), Budget(worker_memory_mib=59))
    assert s.recommended is not None and s.recommended.shape == "5 x 33"
    assert not s.stability.stable
    assert s.stability.deciding == [
        {"figure": "rss_mib_per_slot", "at": 0.02, "recommended": "4 x 44"}
    ]


def test_every_point_between_the_ends_gives_the_stable_answer() -> None:
    """The pick is monotone in every cost, so the two ends bound all that lies between."""
    model = _model()
    workload = Workload(rate=5, turn_seconds=20)
    chosen = size(model, workload).recommended
    assert chosen is not None
    for share in (0.0, 0.25, 0.5, 0.75, 1.0):
        point = {
            name: Range(r.low + share * (r.high - r.low), r.low + share * (r.high - r.low))
            for name, r in model.figures.items()
            if r is not None
        }
        moved = size(replace(model, figures=point), workload).recommended
        assert moved is not None and moved.shape == chosen.shape


# ---- inputs and the report --------------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "budget", "message"),
    [
        (Workload(0.0, 1.0), Budget(), "rate must be a positive number"),
        (Workload(math.nan, 1.0), Budget(), "rate must be a positive number"),
        (Workload(1.0, -2.0), Budget(), "turn seconds must be a positive number"),
        (Workload(1.0, math.inf), Budget(), "turn seconds must be a positive number"),
        (Workload(1.0, 1.0, headroom=10.5), Budget(), "headroom must be between 0 and 10"),
        (Workload(1.0, 1.0, wait_target=0.0), Budget(), "wait target must be between 0 and 1"),
        (Workload(1.0, 1.0), Budget(worker_cpu=0.0), "worker CPU must be between"),
        (Workload(1.0, 1.0), Budget(cpu_target=1.5), "CPU target must be above 0"),
        (Workload(1.0, 1.0), Budget(worker_memory_mib=-1), "worker memory must be a positive"),
        (Workload(1.0, 1.0), Budget(spare_workers=11), "spare workers must be between 0 and 10"),
        (Workload(1.0, 1.0), Budget(slots_per_worker=0), "slots per worker must be between 1"),
        (Workload(1.0, 1.0), Budget(max_slots_per_worker=257), "max slots per worker must be"),
        (Workload(1.0, 1.0), Budget(drain_seconds=-1), "drain seconds must be zero or more"),
    ],
)
def test_bad_inputs_are_refused(workload: Workload, budget: Budget, message: str) -> None:
    with pytest.raises(SizingError, match=message):
        size(_model(), workload, budget)


def _profile(**costs: Any) -> dict[str, Any]:
    scripted = {
        "costs": {
            "worker_cpu_ms_per_turn": [2.0, 3.0],
            "idle_worker_cpu_ms_per_s": [6.0, 8.0],
            "db_connections_per_worker": [3.0, 3.0],
            **costs,
        },
        "memory": {"rss_mib_base": [50.0, 52.0], "rss_mib_per_slot": [0.02, 0.04]},
        "max_slots_measured": 64,
    }
    return {"sizing": {"schema_version": 2, "harnesses": {"scripted": scripted}}}


def test_a_report_is_read_into_ranges_and_unmeasured_optional_figures_are_none() -> None:
    model = cost_model(_profile())
    assert model.figures["worker_cpu_ms_per_turn"] == Range(2.0, 3.0)
    assert model.figures["pg_cpu_ms_per_turn"] is None
    assert model.point("low").rss_mib_base == 50.0
    assert model.point("high", rss_mib_base=51.0).rss_mib_base == 51.0
    assert {f.name for f in fields(CostPoint)} == set(model.figures)


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        ({"summary": []}, "the report has no sizing section"),
        ({"sizing": {"configurations": []}}, "schema 1, not 2: it predates per-turn costs"),
        (
            {"sizing": {"schema_version": 2, "harnesses": {"agents": {}}}},
            "measured no scripted harness \\(measured: agents\\)",
        ),
        (_profile(worker_cpu_ms_per_turn=None), "measured no worker_cpu_ms_per_turn"),
        (_profile(worker_cpu_ms_per_turn=[3.0, 2.0]), "not a \\[min, max\\] range"),
        (_profile(idle_worker_cpu_ms_per_s="fast"), "not a \\[min, max\\] range"),
    ],
)
def test_a_report_that_cannot_size_is_refused_with_what_it_lacks(
    matrix: dict[str, Any], message: str
) -> None:
    with pytest.raises(SizingError, match=message):
        cost_model(matrix)


def test_as_json_names_the_recommendation_and_its_rule() -> None:
    answer = size(_model(), Workload(rate=5, turn_seconds=20)).as_json()
    assert answer["recommended"]["shape"] == "4 x 44"
    assert answer["options"][0] == answer["recommended"]
    assert answer["slots"] == {
        "busy": 100,
        "by_headroom": 130,
        "by_queueing": answer["slots"]["by_queueing"],
        "needed": 130,
        "rule": "headroom",
    }
    assert answer["budget"]["max_slots_per_worker"] == 64
    assert answer["stability"]["stable"] is True
    assert answer["costs"]["figures"]["worker_cpu_ms_per_turn"] == [2.0, 3.0]


# ---- in words ---------------------------------------------------------------------


def test_the_text_gives_the_answer_and_its_rule_first_then_the_options() -> None:
    from stint.ops.sizing_render import render_sizing

    text = render_sizing(size(_model(), Workload(rate=5, turn_seconds=20)), report="m.json")
    lines = text.splitlines()
    assert lines[0].startswith(f"5 turns/s {_X} 20 s = 100 busy slots (Little's law); 130 needed")
    assert lines[2] == f"Recommended: 4 workers {_X} 44 slots (176 slots; 132 with one worker lost)"
    assert lines[3].startswith("  by the rule: the fewest workers that still carry 130 slots")
    table = lines[5:12]
    assert table[0].split()[:3] == ["workers", _X, "slots"]
    assert table[2].startswith(f"4 {_X} 44 (recommended)")
    assert table[3].startswith(f"6 {_X} 32")
    assert "Stable: each of the" in text
    assert "was not CPU-bound in any measured configuration" in text
    assert "(below zero: a worker whose slots all wait stops polling; counted as zero)" not in text
    assert text.rstrip().endswith(
        "pytest loadtest --run-load -k sizing --size-rate 5 --size-turn-seconds 20 --time-scale 10"
    )


def test_the_text_names_the_deciding_figure_and_the_cpu_bound_cells() -> None:
    from stint.ops.sizing_costs import CpuBound
    from stint.ops.sizing_render import render_sizing

    model = replace(
        _model(rss_mib_base=(51.0, 52.0), rss_mib_per_slot=(0.02, 0.2)),
        cpu_bound=[CpuBound("1 x 64, 192 sessions", 2, 2, Range(0.97, 1.0))],
    )
    sizing = size(model, Workload(rate=5, turn_seconds=20), Budget(worker_memory_mib=59))
    text = render_sizing(sizing, report="m.json")
    assert "Not stable: the answer depends on where these figures really are:" in text
    assert f"- rss_mib_per_slot at 0.02: 4 {_X} 44" in text
    assert "CPU-bound in 1 x 64, 192 sessions (2 of 2 reps, host 97\N{EN DASH}100% busy)" in text
