"""One tiny load case in the regular suite, so the load machinery cannot rot."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from stint.lab.backends import LoadBackends
from stint.lab.environment import environment
from stint.lab.model import CaseSpec
from stint.lab.report import write_matrix
from stint.lab.runner import run_case


async def test_a_tiny_case_runs_passes_its_checks_and_reports(tmp_path: Path) -> None:
    spec = CaseSpec(workers=1, slots=2, sessions=4, tool_wait_ms=50)
    backends = LoadBackends(settings=None)
    seen: list[tuple[str, int, int]] = []
    try:
        report = await run_case(spec, backends, tmp_path / "work", lambda *a: seen.append(a))
    finally:
        backends.close()
    assert report.passed, report.as_json()["checks"]
    assert report.cold is not None and report.warm is not None
    assert report.cold.succeeded == report.warm.succeeded == 4
    assert report.samples is not None and report.samples.count > 0
    assert report.samples.worker_cpu_seconds is not None
    # Both memory figures were sampled, and a worker's own memory is part of its RSS.
    assert report.samples.peak_uss_mib_per_worker
    for rss, uss in zip(
        report.samples.peak_rss_mib_per_worker, report.samples.peak_uss_mib_per_worker, strict=True
    ):
        assert 0 < uss < rss
    assert report.idle_drain_s is not None
    assert ("warm", 4, 4) in seen
    names = {c["name"] for c in report.checks}
    assert {
        "contiguous_event_cursors",
        "no_duplicate_effects",
        "active_sessions_within_slots",
        "no_process_left_running",
    } <= names
    matrix_path = write_matrix(
        tmp_path / "report",
        [report.as_json()],
        command="smoke",
        environment=environment(),
        backend=asdict(report.backend),
    )
    matrix = json.loads(matrix_path.read_text())
    assert matrix["summary"][0]["all_checks_passed"] is True
    assert (tmp_path / "report" / "matrix.md").exists()
    assert not (tmp_path / "work" / spec.label).exists()  # a passed case leaves nothing behind
