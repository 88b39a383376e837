"""One tiny load case per adapter in the regular suite, so their load rows cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest

from stint.lab.backends import LoadBackends
from stint.lab.model import CaseSpec
from stint.lab.runner import run_case


@pytest.mark.parametrize(
    ("harness", "spec"),
    [
        ("openai-agents", "stint.lab.load_agents:openai_agents"),
        ("pydantic-ai", "stint.lab.load_agents:pydantic_ai"),
    ],
)
async def test_a_tiny_adapter_case_runs_and_passes_its_checks(
    tmp_path: Path, harness: str, spec: str
) -> None:
    case = CaseSpec(1, 2, 4, 0, harness=harness, model_latency_ms=20)
    backends = LoadBackends(settings=None)
    try:
        report = await run_case(case, backends, tmp_path / "work", lambda *a: None)
    finally:
        backends.close()
    assert report.passed, [c for c in report.as_json()["checks"] if not c["passed"]]
    assert report.configuration["harness"] == spec
    check = next(c for c in report.checks if c["name"] == "model_called_once_per_step")
    assert check["evidence"] == {"model_requests": 16, "expected": 16, "outcomes": {"ok": 16}}
    assert report.warm is not None and report.warm.succeeded == 4
