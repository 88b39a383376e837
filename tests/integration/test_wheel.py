"""The built wheel installs only ``stint``: a user's own ``worker.py`` and ``store/``
keep working beside it, and the console scripts and the public face work.

Builds the wheel from this checkout, installs it (with its dependencies, pinned
by constraints.txt) into a fresh virtual environment, and runs it from a
directory that holds its own ``worker.py`` and ``store`` package.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
    )
    [built] = dist.glob("stint-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    subprocess.run(
        [str(home / "bin/pip"), "install", "--quiet", "-c", str(ROOT / "constraints.txt"), wheel],
        check=True,
        capture_output=True,
    )
    return home


def test_the_wheel_holds_only_the_stint_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {
        "stint",
        wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info",
    }
    assert "stint/store/_migrations/0001_init.sql" in names
    assert "stint/store/sql/events.sql" in names
    assert "stint/py.typed" in names


def test_a_project_with_its_own_worker_and_store_still_imports_both(
    venv: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "store").mkdir(parents=True)
    (project / "worker.py").write_text("WHOSE = 'mine'\n")
    (project / "store" / "__init__.py").write_text("WHOSE = 'mine too'\n")
    script = (
        "import worker, store\n"
        "from stint import Harness, Tool, TurnContext\n"
        "import stint.worker.main, stint.store.worker_store\n"
        "assert worker.WHOSE == 'mine' and store.WHOSE == 'mine too'\n"
        "assert 'site-packages' in stint.worker.main.__file__\n"
        "print(Harness.__name__, Tool.__name__, TurnContext.__name__)\n"
    )
    result = subprocess.run(
        [str(venv / "bin/python"), "-c", script],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["Harness", "Tool", "TurnContext"]


@pytest.mark.parametrize(("script", "mentions"), [("worker", "--slots"), ("stint", "enqueue")])
def test_console_scripts_explain_themselves(
    venv: Path, tmp_path: Path, script: str, mentions: str
) -> None:
    (tmp_path / "worker.py").write_text("raise SystemExit('the user worker.py was imported')\n")
    result = subprocess.run(
        [str(venv / "bin" / script), "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert mentions in result.stdout


def test_the_client_without_its_extra_says_which_extra_to_install(venv: Path) -> None:
    """The wheel's core dependencies leave out httpx: importing stint.client then
    fails with a StintError naming the extra, not a bare ModuleNotFoundError."""
    script = (
        "from stint.errors import StintError\n"
        "try:\n"
        "    import stint.client\n"
        "except StintError as exc:\n"
        "    assert isinstance(exc, ImportError)\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [str(venv / "bin/python"), "-c", script], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'stint[client]'" in result.stdout
