"""The load matrix never passes silently: skipped with a reason, or failed on demand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pytest_matrix(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "loadtest/test_matrix.py",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_run_load_every_case_is_skipped_with_a_reason() -> None:
    result = _pytest_matrix(STINT_REQUIRE_LOAD="0")
    assert result.returncode == 0, result.stdout
    assert "28 skipped" in result.stdout  # 16 scripted, 4 agents, 4 per adapter
    assert "pass --run-load" in result.stdout
    lines = result.stdout.rstrip().splitlines()
    assert "load matrix: not run (pass --run-load)" in lines
    assert "28 skipped" in lines[-1]  # pytest's own closing counts stay last (CI reads them)


def test_require_load_turns_the_skip_into_a_failure() -> None:
    result = _pytest_matrix(STINT_REQUIRE_LOAD="1")
    assert result.returncode == 1
    assert "STINT_REQUIRE_LOAD=1 but the load matrix was not run" in result.stdout
