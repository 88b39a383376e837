"""The load matrix never passes silently: skipped with a reason, or failed on demand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def _collect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "loadtest", "--run-load", "--collect-only", "-q"),
            *("-p", "no:cacheprovider", *args),
        ],
        cwd=ROOT,
        env={**os.environ, "STINT_REQUIRE_LOAD": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )


LONG_RUNS = (
    "test_soak.py",
    "test_ladder.py",
    "test_scale.py",
    "test_quota.py",
    "test_delegation.py",
)


def test_run_load_alone_runs_the_matrix_and_names_the_long_runs_it_leaves_out() -> None:
    """The card's command sizes: it runs the matrix in minutes, not every soak for an hour."""
    result = _collect()
    assert result.returncode == 0, result.stdout
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    # 16 scripted, 4 agents, 4 per adapter (openai-agents, pydantic-ai)
    assert sum("test_matrix.py::" in line for line in collected) == 28
    for module in (*LONG_RUNS, "test_api.py", "test_sizing.py"):
        assert not any(f"loadtest/{module}::" in line for line in collected), module
    assert (
        "long runs not selected: api, delegation, ladder, quota, scale, sizing, soak "
        "(run one with -k NAME, e.g. pytest loadtest --run-load -k api)"
    ) in result.stdout.splitlines()


@pytest.mark.parametrize("name", ["ladder", "sizing", "soak"])
def test_a_long_run_selected_by_name_is_run(name: str) -> None:
    result = _collect("-k", name)
    assert result.returncode == 0, result.stdout
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert any(f"loadtest/test_{name}.py::" in line for line in collected), collected
    assert "long runs not selected" not in result.stdout
