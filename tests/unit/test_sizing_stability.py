"""Stable answers on the committed report: every measured figure moved within its
measured min-max spread leaves the recommendation as it is, or ``stint size`` says
which figure decides it. (A re-run of the matrix refreshes the report; these hold
for whatever it measured.)"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stint.ops.sizing import Budget, Workload, size
from stint.ops.sizing_costs import CostModel, Range, cost_model

MATRIX = Path(__file__).resolve().parents[2] / "docs" / "load" / "matrix.json"
EXAMPLE = Workload(rate=5, turn_seconds=20)


def _committed() -> CostModel:
    return cost_model(json.loads(MATRIX.read_text()))


MODEL = _committed()
MEASURED = {name: r for name, r in MODEL.figures.items() if r is not None}


def _at(model: CostModel, values: dict[str, float]) -> CostModel:
    """The model with every measured figure pinned to one value."""
    return replace(model, figures={name: Range(v, v) for name, v in values.items()})


def _shape(model: CostModel, workload: Workload, budget: Budget | None = None) -> str:
    chosen = size(model, workload, budget).recommended
    return "nothing fits" if chosen is None else chosen.shape


def test_the_committed_report_recommends_a_few_workers_and_says_it_is_stable() -> None:
    sizing = size(MODEL, EXAMPLE)
    assert sizing.recommended is not None, sizing.rule
    assert sizing.recommended.workers <= 6, sizing.recommended  # a few workers, not dozens
    assert sizing.recommended.slots_after_one_lost >= sizing.slots.needed
    assert sizing.stability.stable, sizing.stability
    assert set(sizing.stability.checked) <= set(MEASURED)


@pytest.mark.parametrize("name", sorted(MEASURED))
@pytest.mark.parametrize("others", ["low", "high"])
def test_each_figure_anywhere_in_its_spread_keeps_the_answer(name: str, others: str) -> None:
    expected = _shape(MODEL, EXAMPLE)
    measured = MEASURED[name]
    for share in (0.0, 0.25, 0.5, 0.75, 1.0):
        values = {n: r.at("low" if others == "low" else "high") for n, r in MEASURED.items()}
        values[name] = measured.low + share * (measured.high - measured.low)
        assert _shape(_at(MODEL, values), EXAMPLE) == expected, (name, values[name])


@settings(max_examples=150, derandomize=True, deadline=None)
@given(st.data())
def test_every_figure_moved_at_once_keeps_the_answer(data: st.DataObject) -> None:
    values = {
        name: data.draw(st.floats(r.low, r.high, allow_nan=False), label=name)
        for name, r in MEASURED.items()
    }
    assert _shape(_at(MODEL, values), EXAMPLE) == _shape(MODEL, EXAMPLE)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    data=st.data(),
    rate=st.sampled_from([0.2, 1.0, 5.0, 20.0, 100.0]),
    turn_seconds=st.sampled_from([1.0, 5.0, 20.0, 60.0, 300.0]),
    cpu=st.sampled_from([0.05, 0.25, 1.0]),
    memory=st.sampled_from([53.0, 54.0, 64.0, 128.0]),
)
def test_any_workload_is_stable_or_names_what_decides_it(
    data: st.DataObject, rate: float, turn_seconds: float, cpu: float, memory: float
) -> None:
    """Budgets near the measured figures (53-54 MiB against a 52 MiB worker, a twentieth
    of a CPU) make some answers depend on the figures: then the output must say so."""
    workload = Workload(rate=rate, turn_seconds=turn_seconds)
    budget = Budget(worker_cpu=cpu, worker_memory_mib=memory)
    sizing = size(MODEL, workload, budget)
    values = {
        name: data.draw(st.floats(r.low, r.high, allow_nan=False), label=name)
        for name, r in MEASURED.items()
    }
    moved = _shape(_at(MODEL, values), workload, budget)
    chosen = "nothing fits" if sizing.recommended is None else sizing.recommended.shape
    if moved != chosen:
        assert not sizing.stability.stable
        assert sizing.stability.deciding, sizing.stability
