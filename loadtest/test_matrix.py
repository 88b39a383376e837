"""The workers x slots matrix (``pytest loadtest --run-load``)."""

from __future__ import annotations

import json

import pytest

from stint.lab.load_run import LoadSession
from stint.lab.model import CaseSpec

pytestmark = pytest.mark.load


def test_case(case_spec: CaseSpec, load_session: LoadSession) -> None:
    report = load_session.run(case_spec)
    failed = [c for c in report.checks if not c["passed"]]
    assert report.passed, (
        f"{case_spec.label}: failed checks {json.dumps(failed, default=str)[:2000]}; "
        f"diagnostics: {report.diagnostics}"
    )
