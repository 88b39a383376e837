"""The docker CLI for tests: run, stop, kill, inspect and measure containers.

Plain ``docker`` commands (the engine ``DOCKER_HOST`` names), so a failing test
reads like the commands an operator would type.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from stint.lab.cgroups import memory_of_process

WORKER_IMAGE = os.environ.get("STINT_WORKER_IMAGE", "stint-worker:latest")
TEST_LABEL = "org.stint.role=test"


class DockerError(AssertionError):
    pass


def docker(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise DockerError(f"docker {args[0]} exited {done.returncode}: {done.stderr.strip()}")
    return done


def image_exists(image: str) -> bool:
    return docker("image", "inspect", image, check=False).returncode == 0


def image_size_bytes(image: str) -> int:
    return int(docker("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())


def inspect(container: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(docker("inspect", container).stdout)
    return data[0]


def state(container: str) -> dict[str, Any]:
    found: dict[str, Any] = inspect(container)["State"]
    return found


def logs(container: str) -> str:
    done = docker("logs", container, check=False)
    return done.stdout + done.stderr


def run_worker(
    name: str,
    *,
    env: dict[str, str],
    workspace: Path,
    args: tuple[str, ...] = ("--slots", "4"),
    entrypoint: str | None = None,
    detach: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``docker run`` the worker image on the host network with ``workspace`` mounted,
    confined as deploy/k8s runs it: read-only root filesystem (a tmpfs /tmp), no
    capabilities, no privilege escalation."""
    command = ["run", "--name", name, "--label", TEST_LABEL, "--network", "host"]
    command += ["--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL"]
    command += ["--security-opt", "no-new-privileges"]
    command += ["--volume", f"{workspace}:/var/lib/stint/workspace"]
    for key, value in env.items():
        command += ["--env", f"{key}={value}"]
    if entrypoint is not None:
        command += ["--entrypoint", entrypoint]
    if detach:
        command.append("--detach")
    return docker(*command, WORKER_IMAGE, *args, timeout=300)


def remove(*containers: str) -> None:
    if containers:
        docker("rm", "--force", "--volumes", *containers, check=False)


def peak_memory(container: str) -> dict[str, int | None]:
    """The main process's peak RSS (VmHWM) and the container cgroup's peak usage, in
    bytes, read on this host (None when the engine runs elsewhere or it cannot be read)."""
    pid = state(container).get("Pid") or 0
    rss = None
    cgroup_peak = None
    if pid > 0:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    rss = int(line.split()[1]) * 1024
        except OSError:
            pass
        memory = memory_of_process(pid)
        if memory is not None:
            cgroup_peak = memory.peak_bytes()
    return {"process_peak_rss_bytes": rss, "cgroup_peak_bytes": cgroup_peak}


def compose_command() -> list[str] | None:
    """``docker compose`` (the v2 plugin) where it answers, else ``docker-compose``
    (v1, Debian's package), else None."""
    if docker("compose", "version", check=False).returncode == 0:
        return ["docker", "compose"]
    try:
        done = subprocess.run(
            ["docker-compose", "version"], capture_output=True, timeout=60, check=False
        )
    except FileNotFoundError:
        return None
    return ["docker-compose"] if done.returncode == 0 else None
