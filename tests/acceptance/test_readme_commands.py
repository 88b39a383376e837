"""The README's commands, pasted in order into bash on a fresh clone, all succeed.

Every ```sh block of README.md is run, in order, by bash (``set -euo pipefail``,
each command traced) in a ``git clone`` of this checkout with its uncommitted
changes laid over it, as ``git add -A`` would commit them. The first block is the
setup: ``make demo`` really makes ``.venv`` there (a minute or two, from the
package index and the local wheels) and starts the embedded PostgreSQL, in a data
folder of the test's own. The other blocks, the tour, run as one script after it:
where the machine allows it (``unshare``, as root) in a network namespace of its
own, so the tour's port 8000 cannot collide with anything on this machine;
elsewhere port 8000 must be free. A line whose comment says *not run by the README
test* is left out (``make test``: the whole suite).

curl reads a ``.curlrc`` of the test's with ``--fail-with-body``, so an HTTP error
fails the command that got it while the README shows plain ``curl -sS``. Whatever
the tour left running (worker, API, the embedded PostgreSQL) is stopped at the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).parents[2]
NOT_RUN = "not run by the README test"
_SCRIPT_SECONDS = 840


def readme_blocks(text: str) -> list[str]:
    """The README's ```sh blocks in order, each without its lines marked not run."""
    blocks = []
    for block in re.findall(r"^```sh\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL):
        lines = []
        for line in block.splitlines():
            if NOT_RUN in line:
                assert not line.rstrip().endswith("\\"), f"a continued line is marked: {line}"
                continue
            lines.append(line)
        blocks.append("\n".join(lines) + "\n")
    return blocks


def test_the_setup_is_make_demo_and_the_tour_the_other_blocks() -> None:
    setup, *tour = readme_blocks((ROOT / "README.md").read_text())
    assert setup.split("#")[0].strip() == "make demo"
    script = "".join(tour)
    assert "make test" not in setup + script
    assert ".venv/bin/worker" in script and ".venv/bin/stint api" in script


def _clone(dest: Path) -> None:
    """A clone of HEAD with the working tree's changes (tracked and new) laid over it."""
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(dest)], check=True)

    def files(*flags: str) -> list[str]:
        out = subprocess.run(
            ["git", "ls-files", "-z", *flags], cwd=ROOT, check=True, capture_output=True
        ).stdout.decode()
        return [f for f in out.split("\0") if f]

    deleted = set(files("--deleted"))
    for name in files("--modified", "--others", "--exclude-standard"):
        if name in deleted:
            (dest / name).unlink(missing_ok=True)
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)


def _environment(home: Path, data: Path) -> dict[str, str]:
    """This environment, minus Stint's settings and the test run's own virtualenv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("STINT_", "PYTEST", "VIRTUAL_ENV", "CURL_HOME", "PYTHONPATH"))
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)
    )
    (home / ".curlrc").write_text("--fail-with-body\n")
    return {**env, "CURL_HOME": str(home), "STINT_DATA_DIR": str(data), "PS4": "+ README: "}


def _isolated() -> bool:
    probe = ["unshare", "--net", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def scratch() -> Iterator[Path]:
    # Short (the embedded server's socket path is at most 103 bytes) and 0755, so the
    # postgres user the server runs as under root can reach its data folder.
    path = Path(tempfile.mkdtemp(prefix="stint-readme-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _run(command: list[str], *, cwd: Path, env: dict[str, str], log: Path, seconds: float) -> int:
    """Run ``command`` in a process group of its own; kill what is left of the group."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            return proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return -1
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.timeout(900)
def test_every_readme_command_runs_on_a_fresh_clone(scratch: Path) -> None:
    clone, home, data = scratch / "stint", scratch / "home", scratch / "data"
    home.mkdir()
    _clone(clone)
    setup, *tour = readme_blocks((clone / "README.md").read_text())
    (scratch / "setup.sh").write_text(setup)
    (scratch / "tour.sh").write_text("".join(tour))
    env = _environment(home, data)
    isolate: list[str] = []
    if _isolated():
        isolate = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
    elif not _port_free(8000):
        pytest.skip("port 8000 is taken and no network namespace can be made (unshare, as root)")
    log = scratch / "readme.log"
    bash = ["bash", "-xeuo", "pipefail"]
    started = time.monotonic()
    try:
        code = _run([*bash, str(scratch / "setup.sh")], cwd=clone, env=env, log=log, seconds=600)
        setup_seconds = time.monotonic() - started
        if code == 0:
            tour_command = [*isolate, *bash, str(scratch / "tour.sh")]
            code = _run(tour_command, cwd=clone, env=env, log=log, seconds=240)
    finally:
        stint = clone / ".venv/bin/stint"
        if stint.exists():  # the tour stops it; after a failure it may still run
            stop = [str(stint), "embedded", "stop"]
            subprocess.run(stop, env=env, capture_output=True, timeout=120, check=False)
    seconds = time.monotonic() - started
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
    assert code == 0, f"README commands failed (exit {code}) after {seconds:.0f}s:\n{tail}"
    print(
        f"README commands passed in {seconds:.0f}s (make demo and its setup {setup_seconds:.0f}s)"
    )
