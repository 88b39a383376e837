"""The matrix's CPU ceiling per cell: cores over the CPU a turn costs the workers and
PostgreSQL, and the share of it a burst ran at."""

from __future__ import annotations

import os

import pytest

from stint.lab.costs import Reading, Window, ceiling_fraction, costs, cpu_ceiling
from stint.lab.cpu_clock import HostCpu


def test_the_ceiling_is_the_cores_over_the_cpu_ms_of_a_turn() -> None:
    # 5 ms of worker CPU and 3 ms of PostgreSQL's per turn: 2 cores do 250 turns a second.
    assert cpu_ceiling(2, 5.0, 3.0) == 250.0
    assert cpu_ceiling(4, 5.0, 3.0) == 500.0


def test_an_unmeasured_cost_leaves_the_ceiling_unmeasured() -> None:
    assert cpu_ceiling(2, None, 3.0) is None
    assert cpu_ceiling(2, 5.0, None) is None
    assert cpu_ceiling(2, 0.0, 0.0) is None


def test_the_fraction_is_the_bursts_turns_per_second_over_the_ceiling() -> None:
    assert ceiling_fraction(100.0, 250.0) == 0.4
    assert ceiling_fraction(100.0, None) is None


def _reading(at: float, worker: float, postgres: float, busy: float) -> Reading:
    return Reading(at=at, per_worker=[worker], postgres=postgres, host=HostCpu(busy, 2 * at))


def test_a_cases_costs_carry_its_ceiling_and_the_fraction_of_it_it_reached() -> None:
    # 100 turns in a warm burst: the worker spent 0.5 s (5 ms a turn), PostgreSQL 0.3 s.
    warm = Window(_reading(10.0, 1.0, 2.0, 5.0), _reading(12.0, 1.5, 2.3, 6.0))
    idle = Window(warm.end, _reading(13.0, 1.51, 2.31, 6.1))
    found = costs(
        workers=1,
        turns=100,
        turns_per_s=50.0,
        warm=warm,
        idle=idle,
        hold=None,
        hold_busy_slots=None,
        load_average=[1.0, 1.0, 1.0],
    )
    assert found.worker_cpu_ms_per_turn == pytest.approx(5.0)
    assert found.pg_cpu_ms_per_turn == pytest.approx(3.0)
    cores = os.cpu_count() or 1
    assert found.cpu_ceiling_turns_per_s == pytest.approx(cores * 1000 / 8.0, abs=0.1)
    assert found.cpu_ceiling_fraction == pytest.approx(50.0 / (cores * 125.0), abs=0.001)
