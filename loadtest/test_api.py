"""The API load case (``pytest loadtest --run-load -k api``): one API process,
1,000 SSE followers on 100 sessions while 2 workers x 4 slots run two bursts.
Writes api.json and api.md into --report-dir."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import uvloop

from stint.lab.api_case import ApiCaseSpec, run_api_case
from stint.lab.api_report import write_api_report
from stint.lab.backends import LoadBackends

pytestmark = [pytest.mark.load, pytest.mark.long_run("api")]


def test_api_followers_while_workers_run(request: pytest.FixtureRequest) -> None:
    config = request.config
    report_dir = Path(str(config.getoption("--report-dir"))).resolve()
    backends = LoadBackends(settings=None)
    try:
        report = uvloop.run(run_api_case(ApiCaseSpec(), backends, report_dir / "work"))
    finally:
        backends.close()
    command = shlex.join(["pytest", *config.invocation_params.args])
    written = write_api_report(report_dir, report.as_json(), command=command)
    failed = [c for c in report.checks if not c["passed"]]
    assert report.passed, (
        f"failed checks {json.dumps(failed, default=str)[:2000]}; see {written}; "
        f"diagnostics: {report.diagnostics}"
    )
