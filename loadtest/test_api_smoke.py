"""A tiny API load case in the regular suite, so its machinery cannot rot."""

from __future__ import annotations

import json
from pathlib import Path

from stint.lab.api_case import ApiCaseSpec, run_api_case
from stint.lab.api_report import write_api_report
from stint.lab.backends import LoadBackends


async def test_a_tiny_api_case_runs_passes_its_checks_and_reports(tmp_path: Path) -> None:
    spec = ApiCaseSpec(followers=12, sessions=4, workers=1, slots=2, bursts=2, tool_wait_ms=20)
    backends = LoadBackends(settings=None)
    try:
        report = await run_api_case(spec, backends, tmp_path / "work")
    finally:
        backends.close()
    assert report.passed, report.as_json()["checks"]
    assert report.latency is not None and report.latency["deliveries"] == 12 * 2 * 4
    assert report.latency["p50_s"] is not None and report.latency["p99_s"] is not None
    assert report.api is not None and report.api["peak_rss_mib"] > 0
    assert report.api["peak_postgres_connections_by_role"]["stint-api-listen"] == 1
    names = {c["name"] for c in report.checks}
    assert {"every_follower_got_every_event_once_in_order", "contiguous_event_cursors"} <= names
    markdown = write_api_report(tmp_path / "report", report.as_json(), command="smoke")
    assert "delivery latency p99" in markdown.read_text()
    assert json.loads((tmp_path / "report" / "api.json").read_text())["passed"] is True
    assert not (tmp_path / "work" / spec.label).exists()  # a passed case leaves nothing behind
