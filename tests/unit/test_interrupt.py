"""A test run killed with SIGTERM still runs its fixtures' teardown (workers and
throwaway clusters are stopped by teardown, so nothing is left running)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

_CONFTEST = """
from stint.lab.interrupt import sigterm_as_interrupt

def pytest_configure(config):
    sigterm_as_interrupt()
"""

_TEST = """
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent

@pytest.fixture
def resource():
    (HERE / "set-up").touch()
    yield
    (HERE / "torn-down").touch()

def test_waits_for_the_signal(resource):
    (HERE / "running").touch()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.02)
"""


def _wait_for(path: Path, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def _killed_run(tmp_path: Path, conftest: str) -> Path:
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_victim.py").write_text(_TEST)
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The test body's own marker, not the fixture's: a SIGTERM that lands while the
        # fixture is still being set up (before its yield) has no teardown to run.
        _wait_for(tmp_path / "running")
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=60)
    finally:
        run.kill()
    return tmp_path / "torn-down"


def test_sigterm_runs_the_teardown(tmp_path: Path) -> None:
    assert _killed_run(tmp_path, _CONFTEST).exists()


def test_without_it_sigterm_skips_the_teardown(tmp_path: Path) -> None:
    """The control: what the handler changes (were this to pass with the handler
    gone, the test above would prove nothing)."""
    assert not _killed_run(tmp_path, "").exists()
