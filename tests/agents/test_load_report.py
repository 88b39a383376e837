"""The load report with agents cases: grouped apart, shown beside their scripted twins."""

from __future__ import annotations

from dataclasses import asdict

from stint.lab.model import CaseSpec
from stint.lab.report import build_matrix, render_markdown
from tests.unit.test_report import BACKEND, COMMAND, ENVIRONMENT, _case, _cases, _samples

_X = "\N{MULTIPLICATION SIGN}"


def test_agents_cases_label_and_limit() -> None:
    spec = CaseSpec(2, 4, 24, 0, rep=1, harness="agents", model_latency_ms=250)
    assert spec.label == "agents-2x4-24s-250ms-r1"
    assert spec.turn_ms == 500
    assert spec.physical_limit == 24 / (3 * 0.5)


def test_agents_rows_sit_beside_the_scripted_twin_and_stay_out_of_sizing() -> None:
    agents = CaseSpec(2, 4, 24, 0, rep=1, harness="agents", model_latency_ms=250)
    cases = [
        *_cases(),
        _case(
            agents,
            warm=(10.0, 1.9),
            cold=(8.0, 2.5),
            samples=_samples(300.0, [150.0, 150.0], 6.5, 120.0),
            idle=0.1,
        ),
    ]
    matrix = build_matrix(
        cases,
        command=COMMAND,
        environment=ENVIRONMENT,
        backend=asdict(BACKEND),
        generated_at="2026-12-01T10:00:00+00:00",
    )
    harnesses = [(r["harness"], r["workers"], r["slots"]) for r in matrix["summary"]]
    assert harnesses == [("scripted", 1, 1), ("scripted", 2, 4), ("agents", 2, 4)]
    baseline = build_matrix(
        _cases(),
        command=COMMAND,
        environment=ENVIRONMENT,
        backend=asdict(BACKEND),
        generated_at="2026-12-01T10:00:00+00:00",
    )
    # The agents cases are sized apart: the scripted fixture's profile is unchanged by them.
    harnesses = matrix["sizing"]["harnesses"]
    assert harnesses["scripted"] == baseline["sizing"]["harnesses"]["scripted"]
    assert [c["configuration"] for c in harnesses["agents"]["configurations"]] == [
        f"2 {_X} 4, 24 sessions, 2 {_X} 250 ms model calls"
    ]
    text = render_markdown(matrix)
    section = text.split("### The agents harness beside the scripted fixture")[1]
    rows = [line for line in section.splitlines() if line.startswith("| scripted") or
            line.startswith("| agents")]  # fmt: skip
    assert rows[0].startswith(f"| scripted | 2 {_X} 4 | 24 | 250ms tool wait | 2/2 |")
    assert rows[1].startswith(
        f"| agents | 2 {_X} 4 | 24 | 2{_X}250ms model + journal tool | 1/1 | 10.00 | 8.00 |"
    )
    # The seed-layout tables above keep the scripted rows only.
    seed = text.split("### The agents harness")[0]
    assert "agents" not in seed.split("## Results")[1]
