"""Sizing arithmetic: operators deploy what this says, so every rule is pinned here."""

from __future__ import annotations

import math
from typing import Any

import pytest

from stint.ops.sizing import Sizing, measured_profile, render_sizing, size


def _config(slots: int, **figures: Any) -> dict[str, Any]:
    return {
        "slots_per_worker": slots,
        "groups": 1,
        "workers_measured": [1],
        "peak_rss_mib_per_worker": figures.get("rss"),
        "db_connections_per_worker": figures.get("connections"),
        "best_warm_fraction_of_limit": figures.get("efficiency"),
        "efficiency": figures.get("efficiency"),
        "all_checks_passed": figures.get("passed", True),
    }


def _profile(*configurations: dict[str, Any]) -> dict[str, Any]:
    return {"configurations": list(configurations)}


def _row(workers: int, slots: int, **figures: Any) -> dict[str, Any]:
    """A summary row as loadtest.report builds it (only the keys sizing reads)."""
    warm = figures.get("warm")  # (turns/s min, turns/s max) or None
    limit = figures.get("limit", 10.0)
    return {
        "workers": workers,
        "slots": slots,
        "physical_limit_turns_per_s": limit,
        "warm": {
            "turns_per_s": list(warm) if warm else None,
            "fraction_of_limit": [w / limit for w in warm] if warm else None,
            "e2e_p95_s": None,
        },
        "peak_rss_mib_per_worker_max": figures.get("rss"),
        "db_connections_per_worker_max": figures.get("connections"),
        "all_checks_passed": figures.get("passed", True),
    }


def test_required_slots_workers_memory_and_connections() -> None:
    profile = _profile(_config(4, efficiency=1.0, rss=150.0, connections=5.0))
    s = size(profile, rate=1.0, turn_seconds=10.0, headroom=0.3)
    assert s.required_slots == 13
    assert (s.slots_per_worker, s.workers, s.total_slots) == (4, 4, 16)
    assert (s.memory_mib, s.db_connections) == (600, 20)
    assert (s.peak_rss_mib_per_worker, s.db_connections_per_worker) == (150.0, 5.0)


def test_float_noise_does_not_add_a_slot() -> None:
    assert 3.0 * 30.0 * (1 + 0.1) > 99  # 99.00000000000001 in floats
    s = size(_profile(_config(4, efficiency=1.0)), rate=3.0, turn_seconds=30.0, headroom=0.1)
    assert s.required_slots == 99
    assert s.workers == 25


def test_efficiency_below_one_needs_more_slots() -> None:
    profile = _profile(_config(4, efficiency=0.5, rss=100.0))
    s = size(profile, rate=2.0, turn_seconds=3.0, headroom=0.0)
    assert s.efficiency == 0.5
    assert s.required_slots == 12  # 2 x 3 / 0.5
    assert s.workers == 3
    assert s.memory_mib == 300


def test_headroom_defaults_to_thirty_percent() -> None:
    s = size(_profile(_config(2, efficiency=1.0)), rate=1.0, turn_seconds=20.0)
    assert s.headroom == 0.3
    assert s.required_slots == 26
    assert s.workers == 13


def test_default_is_the_most_slots_per_worker_within_a_tenth_of_the_best_efficiency() -> None:
    close = _profile(_config(1, efficiency=0.99), _config(4, efficiency=0.93))
    assert size(close, rate=1, turn_seconds=1).slots_per_worker == 4
    far = _profile(_config(2, efficiency=0.9), _config(4, efficiency=0.7))
    assert size(far, rate=1, turn_seconds=1).slots_per_worker == 2
    tie = _profile(_config(2, efficiency=0.8), _config(8, efficiency=0.8), _config(4))
    assert size(tie, rate=1, turn_seconds=1).slots_per_worker == 8


def test_configurations_that_failed_checks_are_not_preferred() -> None:
    profile = _profile(_config(4, efficiency=0.95, passed=False), _config(2, efficiency=0.6))
    assert size(profile, rate=1, turn_seconds=1).slots_per_worker == 2
    forced = size(profile, rate=1, turn_seconds=1, slots_per_worker=4)
    assert any("failed checks" in note for note in forced.notes)


def test_unmeasured_figures_are_none_and_said_so() -> None:
    s = size(_profile(_config(4)), rate=1.0, turn_seconds=4.0, headroom=0.0)
    assert s.efficiency == 1.0
    assert s.required_slots == 4
    assert s.memory_mib is None
    assert s.db_connections is None
    joined = " ".join(s.notes)
    assert "efficiency not measured" in joined
    assert "memory not measured" in joined
    assert "connections per worker not measured" in joined


def test_explicit_slots_per_worker_not_in_the_report() -> None:
    profile = _profile(_config(4, efficiency=0.5, rss=150.0, connections=5.0))
    s = size(profile, rate=1.0, turn_seconds=10.0, headroom=0.0, slots_per_worker=3)
    assert (s.slots_per_worker, s.efficiency, s.required_slots, s.workers) == (3, 1.0, 10, 4)
    assert s.memory_mib is None
    assert any("3 slots per worker was not measured" in note for note in s.notes)


def test_no_measured_configuration_needs_explicit_slots() -> None:
    with pytest.raises(ValueError, match="no configuration"):
        size(_profile(), rate=1, turn_seconds=1)
    assert size(_profile(), rate=1, turn_seconds=1, slots_per_worker=2).workers == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 0.0}, "rate must be a positive"),
        ({"rate": -1.0}, "rate must be a positive"),
        ({"rate": math.nan}, "rate must be a positive"),
        ({"rate": math.inf}, "rate must be a positive"),
        ({"turn_seconds": 0.0}, "turn seconds must be a positive"),
        ({"turn_seconds": -2.0}, "turn seconds must be a positive"),
        ({"headroom": -0.1}, "headroom must be between 0 and 10"),
        ({"headroom": 10.5}, "headroom must be between 0 and 10"),
        ({"slots_per_worker": 0}, "slots per worker must be at least 1"),
    ],
)
def test_bad_inputs_raise_value_error(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"rate": 1.0, "turn_seconds": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        size(_profile(_config(4, efficiency=1.0)), **arguments)


def test_headroom_bounds_are_inclusive() -> None:
    profile = _profile(_config(1, efficiency=1.0))
    assert size(profile, rate=1, turn_seconds=1, headroom=0).required_slots == 1
    assert size(profile, rate=1, turn_seconds=1, headroom=10).required_slots == 11


def test_profile_without_configurations_is_rejected() -> None:
    with pytest.raises(ValueError, match="no list of measured configurations"):
        size({"summary": []}, rate=1, turn_seconds=1)


def test_measured_profile_groups_by_slots_per_worker() -> None:
    summary = [
        _row(1, 4, warm=(8.0, 9.0), rss=200.0, connections=5.0),
        _row(2, 4, warm=(6.0, 9.5), rss=180.0, connections=6.0, passed=False),
        _row(2, 2, warm=None, rss=None, connections=None),
    ]
    profile = measured_profile(summary)
    two, four = profile["configurations"]
    assert four["slots_per_worker"] == 4
    assert four["groups"] == 2
    assert four["workers_measured"] == [1, 2]
    assert four["peak_rss_mib_per_worker"] == 200.0
    assert four["db_connections_per_worker"] == 6.0
    assert four["efficiency"] == pytest.approx(0.6)  # the lowest warm turns/s over the limit
    assert four["best_warm_fraction_of_limit"] == pytest.approx(0.95)
    assert four["all_checks_passed"] is False
    assert two["slots_per_worker"] == 2
    for key in (
        "peak_rss_mib_per_worker",
        "db_connections_per_worker",
        "efficiency",
        "best_warm_fraction_of_limit",
    ):
        assert two[key] is None


def test_measured_efficiency_is_capped_at_one() -> None:
    profile = measured_profile([_row(1, 1, warm=(12.0, 13.0), limit=10.0)])
    assert profile["configurations"][0]["efficiency"] == 1.0


def test_measured_profile_rejects_rows_without_slots() -> None:
    with pytest.raises(ValueError, match="summary row 1"):
        measured_profile([_row(1, 1), {"workers": 2}])


def test_render_sizing_gives_the_answer_first() -> None:
    s = size(
        _profile(_config(4, efficiency=1.0, rss=150.0, connections=5.0)),
        rate=1.0,
        turn_seconds=10.0,
    )
    text = render_sizing(s)
    first = text.splitlines()[0]
    assert first == "Workers: 4 \N{MULTIPLICATION SIGN} 4 slots each (16 slots)"
    assert "Required active slots: 13" in text
    assert "600 MiB" in text
    assert "about 20 in total" in text
    assert all(f"- {note}" in text for note in s.notes)


def test_render_sizing_says_not_measured() -> None:
    text = render_sizing(size(_profile(_config(2)), rate=1, turn_seconds=1))
    assert "Memory: not measured" in text
    assert "Database connections: not measured" in text


def test_as_json_round_trips_the_fields() -> None:
    s = size(_profile(_config(4, efficiency=1.0)), rate=1, turn_seconds=1)
    assert Sizing(**s.as_json()) == s
