"""The load test's container backend: a 1x4 case whose PostgreSQL is a container
started through testcontainers from Stint's own image, limited by Docker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stint.lab.backends import POSTGRES_CPUS, POSTGRES_MEMORY_BYTES, URL_ENV, LoadBackends
from stint.lab.model import CaseSpec
from stint.lab.runner import run_case

pytestmark = pytest.mark.docker

REPORT = Path(__file__).resolve().parents[2] / "report" / "deploy" / "load-1x4-container.json"


async def test_a_1x4_case_runs_on_a_postgres_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    spec = CaseSpec(workers=1, slots=4, sessions=24, tool_wait_ms=250)
    backends = LoadBackends()
    try:
        assert backends.kind == "container", backends.container_unavailable
        report = await run_case(spec, backends, tmp_path / "work", lambda *a: None)
    finally:
        backends.close()
    document = report.as_json()
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(document, indent=2, default=str) + "\n")
    assert report.passed, document["checks"]
    assert report.backend.kind == "container"
    assert report.backend.postgres_limits == {
        "cpus": POSTGRES_CPUS,
        "memory_bytes": POSTGRES_MEMORY_BYTES,
        "via": "docker",
    }
    assert report.cold is not None and report.warm is not None
    assert report.cold.succeeded == report.warm.succeeded == 24
    # Docker's limit is a cgroup on this host: the server's peak memory was read from it.
    assert report.samples is not None and report.samples.pg_peak_memory_mib
