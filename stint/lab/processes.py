"""Start and stop real ``worker`` and ``stint api`` processes (the demo, the tests and
the load test use these)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["spawn_api", "spawn_worker", "stop_workers"]


def spawn_worker(
    *,
    env: Mapping[str, str],
    args: Sequence[str] = (),
    log_path: Path | None = None,
    cgroup_procs: Sequence[Path] = (),
    prefix: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Start ``python -m stint.worker.main ARGS`` with ``env`` added to this environment,
    inside the given cgroups (their ``cgroup.procs`` files) before it runs. ``prefix``
    is a command that execs the worker (``ip netns exec NAME``: another host)."""
    return _spawn(["stint.worker.main", *args], env, log_path, cgroup_procs, prefix)


def spawn_api(
    *,
    env: Mapping[str, str],
    port: int,
    log_path: Path | None = None,
    cgroup_procs: Sequence[Path] = (),
) -> subprocess.Popen[bytes]:
    """Start ``stint api --port PORT`` (on 127.0.0.1 unless ``env`` says otherwise)."""
    return _spawn(["stint.ops.cli", "api", "--port", str(port)], env, log_path, cgroup_procs)


def _spawn(
    module_args: Sequence[str],
    env: Mapping[str, str],
    log_path: Path | None,
    cgroup_procs: Sequence[Path],
    prefix: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    out = log_path.open("ab") if log_path else subprocess.DEVNULL

    def join_cgroups() -> None:
        for procs in cgroup_procs:
            procs.write_text(str(os.getpid()))

    try:
        return subprocess.Popen(
            [*prefix, sys.executable, "-m", *module_args],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=join_cgroups if cgroup_procs else None,
        )
    finally:
        if log_path and not isinstance(out, int):
            out.close()


def stop_workers(procs: Sequence[subprocess.Popen[bytes]], *, timeout: float = 60) -> list[int]:
    """SIGTERM every worker (they drain), wait, SIGKILL what outlives ``timeout``."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait())
    return codes
