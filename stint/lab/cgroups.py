"""CPU and memory limits for load-test processes through Linux cgroups (v1 or v2).

Load figures only compare across cases and machines when PostgreSQL and the
workers get the same resources each time. Without a Docker engine, a cgroup
of our own is how a local server or worker gets "1 CPU, 1 GiB" and how its
peak memory and OOM kills are read afterwards.

Each :class:`Cgroup` is one directory in every hierarchy that carries the cpu
and memory controllers: one cgroup2 directory when a cgroup2 mount offers
both, else a directory in each of the v1 cpu and memory hierarchies. Names are
``stint-load-<name>-<random>`` so parallel runs never collide. Machines that do
not let us create cgroups (not root, read-only mount, controller missing) are
expected, not errors: :meth:`Cgroup.create` then returns ``None`` and
:func:`cgroup_support` says why.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stint.lab.errors import CgroupError

__all__ = [
    "Cgroup",
    "CgroupError",
    "CgroupMemory",
    "CgroupSupport",
    "cgroup_support",
    "memory_of_process",
]

_MOUNTINFO = Path("/proc/self/mountinfo")
_PREFIX = "stint-load-"
_CONTROLLERS = ("cpu", "memory")
_CPU_PERIOD_US = 100_000
_MIN_CPU_QUOTA_US = 1_000  # the kernel refuses smaller quotas
_PROBE_MEMORY_BYTES = 64 * 2**20
_REMOVE_TIMEOUT_S = 10.0
_POLL_S = 0.02
# mkdir failing with these means "this machine does not let us", not a bug.
_NOT_PERMITTED = {errno.EACCES, errno.EPERM, errno.EROFS}


class _Unavailable(Exception):
    """This machine does not let us create cgroups; the message says why."""


@dataclass(frozen=True)
class CgroupSupport:
    """Whether :meth:`Cgroup.create` works here: the cgroup version, or ``None`` and why not."""

    version: int | None
    detail: str

    @property
    def available(self) -> bool:
        return self.version is not None

    def limits(self, cpus: float, memory_bytes: int) -> dict[str, Any]:
        """The limits a cgroup created here with these figures reports (see Cgroup.limits)."""
        if self.version is None:
            raise CgroupError("cgroups are not available here", reason=self.detail)
        return _limits(cpus, memory_bytes, self.version)


@dataclass(frozen=True)
class CgroupMemory:
    """The memory figures of one cgroup directory, read the way its version exposes them."""

    directory: Path
    version: int

    def peak_bytes(self) -> int | None:
        """Highest memory use so far (page cache included), or None when not exposed."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.directory / name).read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return None  # memory.peak needs Linux 5.19; gone once the cgroup is removed

    def oom_kills(self) -> int | None:
        """Processes the OOM killer ended in this cgroup, or None when not counted."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            lines = (self.directory / name).read_text(encoding="ascii").splitlines()
        except OSError:
            return None
        for line in lines:
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return None  # v1 kernels before 4.13 do not count kills


class Cgroup:
    """A cgroup of our own with a CPU quota and a memory limit.

    Made by :meth:`create`; the caller puts processes in it (``join``, or
    ``procs_files`` for a child to join before it execs), stops them, and
    calls :meth:`remove`.
    """

    def __init__(self, name: str, layout: _Layout, *, cpus: float, memory_bytes: int) -> None:
        self.name = name
        self.cpus = cpus
        self.memory_bytes = memory_bytes
        self._layout = layout
        self._memory = CgroupMemory(layout.memory_parent / name, layout.version)

    @classmethod
    def create(cls, name: str, *, cpus: float, memory_bytes: int) -> Cgroup | None:
        """A new cgroup limited to ``cpus`` CPUs and ``memory_bytes``; None if not possible here.

        :func:`cgroup_support` gives the reason when this returns None.
        """
        try:
            return cls._open(name, cpus=cpus, memory_bytes=memory_bytes)
        except _Unavailable:
            return None

    @property
    def version(self) -> int:
        return self._layout.version

    @property
    def directories(self) -> list[Path]:
        """This cgroup's directory in each hierarchy it spans."""
        return [parent / self.name for parent in self._layout.parents]

    @property
    def procs_files(self) -> list[Path]:
        """The cgroup.procs files a pid must be written to, one per hierarchy."""
        return [directory / "cgroup.procs" for directory in self.directories]

    def join(self, pid: int) -> None:
        """Move process ``pid`` (not its existing children) into this cgroup."""
        for procs in self.procs_files:
            _write(procs, str(pid), pid=pid)

    def memory_peak_bytes(self) -> int | None:
        return self._memory.peak_bytes()

    def oom_kills(self) -> int | None:
        return self._memory.oom_kills()

    def limits(self) -> dict[str, Any]:
        """What applies, for reports: ``{"cpus", "memory_bytes", "cgroup_version"}``."""
        return _limits(self.cpus, self.memory_bytes, self.version)

    def remove(self, *, timeout: float = _REMOVE_TIMEOUT_S) -> None:
        """Remove the cgroup; already removed is fine.

        The caller stops its processes first; the kernel refuses (EBUSY) while
        any is still exiting, so this polls until ``timeout`` before failing.
        """
        deadline = time.monotonic() + timeout
        for directory in self.directories:
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                        raise CgroupError(
                            "could not remove the cgroup",
                            path=directory,
                            error=exc.strerror,
                            pids=_pids(directory),
                        ) from exc
                time.sleep(_POLL_S)

    def __repr__(self) -> str:
        return f"Cgroup({self.name!r}, v{self.version}, {self.cpus:g} CPU, {self.memory_bytes} B)"

    @classmethod
    def _open(cls, name: str, *, cpus: float, memory_bytes: int) -> Cgroup:
        if cpus <= 0 or memory_bytes <= 0:
            raise ValueError(f"cgroup limits must be positive: cpus={cpus}, bytes={memory_bytes}")
        layout = _find_layout()
        unique = f"{_PREFIX}{_safe(name)}-{secrets.token_hex(4)}"
        cgroup = cls(unique, layout, cpus=cpus, memory_bytes=memory_bytes)
        made: list[Path] = []
        try:
            for directory in cgroup.directories:
                _mkdir(directory)
                made.append(directory)
            cgroup._write_limits()
        except BaseException:
            for directory in reversed(made):
                directory.rmdir()
            raise
        return cgroup

    def _write_limits(self) -> None:
        quota = max(_MIN_CPU_QUOTA_US, round(self.cpus * _CPU_PERIOD_US))
        cpu_dir = self._layout.cpu_parent / self.name
        memory_dir = self._layout.memory_parent / self.name
        if self.version == 2:
            _write(cpu_dir / "cpu.max", f"{quota} {_CPU_PERIOD_US}")
            _write(memory_dir / "memory.max", str(self.memory_bytes))
        else:
            _write(cpu_dir / "cpu.cfs_period_us", str(_CPU_PERIOD_US))
            _write(cpu_dir / "cpu.cfs_quota_us", str(quota))
            _write(memory_dir / "memory.limit_in_bytes", str(self.memory_bytes))


def cgroup_support() -> CgroupSupport:
    """Whether cgroups can be created here, found by creating and removing a probe one."""
    try:
        probe = Cgroup._open("probe", cpus=1.0, memory_bytes=_PROBE_MEMORY_BYTES)
    except _Unavailable as exc:
        return CgroupSupport(None, str(exc))
    probe.remove()
    return CgroupSupport(probe.version, probe._layout.describe())


def memory_of_process(pid: int) -> CgroupMemory | None:
    """The memory cgroup process ``pid`` is in, or None when this host cannot read it.

    For processes we did not place ourselves, e.g. a container's server when
    the Docker engine runs on this host.
    """
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    mounts = _mounts()
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0":
            version, marker = 2, "memory.current"
            candidates = [m for m in mounts if m.fstype == "cgroup2"]
        elif "memory" in controllers.split(","):
            version, marker = 1, "memory.usage_in_bytes"
            candidates = [m for m in mounts if m.fstype == "cgroup" and "memory" in m.options]
        else:
            continue
        for mount in candidates:
            directory = mount.locate(path)
            if directory is not None and (directory / marker).is_file():
                return CgroupMemory(directory, version)
    return None


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class _Mount:
    """One cgroup filesystem mount, from /proc/self/mountinfo."""

    root: str  # the hierarchy path mounted here
    point: Path
    fstype: str  # "cgroup" (v1) or "cgroup2"
    read_only: bool
    options: frozenset[str]  # super options; for v1 they name the controllers

    def locate(self, path: str) -> Path | None:
        """The directory of hierarchy path ``path`` under this mount, if it is visible here."""
        root = self.root.rstrip("/")
        if path != root and not path.startswith(root + "/"):
            return None
        return self.point / path[len(root) :].lstrip("/")


@dataclass(frozen=True)
class _Layout:
    """Where new cgroups go: the parent directory for the cpu and the memory controller."""

    version: int
    cpu_parent: Path
    memory_parent: Path

    @property
    def parents(self) -> list[Path]:
        return list(dict.fromkeys([self.cpu_parent, self.memory_parent]))

    def describe(self) -> str:
        if self.version == 2:
            return f"cgroup v2 at {self.cpu_parent}"
        return f"cgroup v1 (cpu at {self.cpu_parent}, memory at {self.memory_parent})"


def _mounts() -> list[_Mount]:
    try:
        text = _MOUNTINFO.read_text(encoding="utf-8")
    except OSError:
        return []
    mounts = []
    for line in text.splitlines():
        before, separator, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not separator or len(fields) < 6 or len(tail) < 3:
            continue
        if tail[0] in ("cgroup", "cgroup2"):
            mounts.append(
                _Mount(
                    root=_unescape(fields[3]),
                    point=Path(_unescape(fields[4])),
                    fstype=tail[0],
                    read_only="ro" in fields[5].split(","),
                    options=frozenset(tail[2].split(",")),
                )
            )
    return mounts


def _find_layout() -> _Layout:
    """cgroup2 when a cgroup2 mount offers cpu and memory, else the v1 hierarchies."""
    mounts = _mounts()
    if not mounts:
        raise _Unavailable("no cgroup filesystem is mounted")
    reasons = []
    for mount in (m for m in mounts if m.fstype == "cgroup2"):
        try:
            return _v2_layout(mount)
        except _Unavailable as exc:
            reasons.append(str(exc))
    v1 = [m for m in mounts if m.fstype == "cgroup"]
    cpu = next((m for m in v1 if "cpu" in m.options), None)
    memory = next((m for m in v1 if "memory" in m.options), None)
    if cpu is None or memory is None:
        missing = [name for name, m in (("cpu", cpu), ("memory", memory)) if m is None]
        reasons.append(f"no cgroup v1 hierarchy for {' and '.join(missing)}")
        raise _Unavailable("; ".join(reasons))
    _check_writable(cpu)
    _check_writable(memory)
    return _Layout(1, cpu.point, memory.point)


def _v2_layout(mount: _Mount) -> _Layout:
    available = _words(mount.point / "cgroup.controllers")
    missing = [c for c in _CONTROLLERS if c not in available]
    if missing:
        raise _Unavailable(f"cgroup2 at {mount.point} lacks controllers: {', '.join(missing)}")
    _check_writable(mount)
    subtree = mount.point / "cgroup.subtree_control"
    disabled = [c for c in _CONTROLLERS if c not in _words(subtree)]
    if disabled:
        try:
            subtree.write_text(" ".join(f"+{c}" for c in disabled), encoding="ascii")
        except OSError as exc:
            raise _Unavailable(
                f"cannot enable {' and '.join(disabled)} in {subtree}: {exc.strerror}"
            ) from exc
    return _Layout(2, mount.point, mount.point)


def _check_writable(mount: _Mount) -> None:
    if mount.read_only:
        raise _Unavailable(f"{mount.point} is mounted read-only")
    if not os.access(mount.point, os.W_OK):
        raise _Unavailable(f"cannot create cgroups under {mount.point} (needs root)")


# --------------------------------------------------------------------------- files


def _mkdir(directory: Path) -> None:
    try:
        directory.mkdir()
    except OSError as exc:
        if exc.errno in _NOT_PERMITTED:
            raise _Unavailable(f"cannot create {directory}: {exc.strerror}") from exc
        raise CgroupError(
            "could not create the cgroup", path=directory, error=exc.strerror
        ) from exc


def _write(path: Path, value: str, **context: object) -> None:
    try:
        path.write_text(value, encoding="ascii")
    except OSError as exc:
        raise CgroupError(
            f"could not write {path.name}", path=path, value=value, error=exc.strerror, **context
        ) from exc


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text(encoding="ascii").split())
    except OSError:
        return set()


def _pids(directory: Path) -> str:
    """The pids still in ``directory``, for error messages."""
    try:
        return ",".join((directory / "cgroup.procs").read_text(encoding="ascii").split()) or "none"
    except OSError:
        return "unknown"


def _limits(cpus: float, memory_bytes: int, version: int) -> dict[str, Any]:
    return {"cpus": cpus, "memory_bytes": memory_bytes, "cgroup_version": version}


def _safe(name: str) -> str:
    """``name`` as a short directory-name fragment."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:64] or "x"


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
