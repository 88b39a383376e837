"""The native effect journal: one append-only, fsync'd file per session.

A native tool's effect *is* a line in this journal, keyed by the step key. The
line is on disk (file and, for a new file, its directory fsync'd) before the
step may commit, so a crash between the two is found by ``lookup``. Appends
take an exclusive ``flock`` and refuse a key that is already present, so even a
zombie worker that wakes up mid-effect cannot write the same effect twice.
Effects are a session's private data: files are 0600 in a 0700 folder,
whatever the umask, and a folder of ours found wider is narrowed (a shared
volume mounted by someone else, e.g. a container's workspace owned by root, is
left as its owner set it: only its owner may change it, and the files in it
are 0600 all the same). Retention removes a
journal only under the same lock, and an append that finds its file was
removed meanwhile opens it again, so no effect is ever written to a removed file.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

from stint.errors import StintError

__all__ = ["DuplicateEffect", "EffectJournal", "private_dir"]

_FILE_MODE = 0o600
_DIR_MODE = 0o700


def private_dir(path: Path) -> None:
    """Create ``path`` (and parents) if needed; make it 0700 (owner only) when it
    is ours to change."""
    path.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    found = path.stat()
    if found.st_uid == os.geteuid() and found.st_mode & 0o777 != _DIR_MODE:
        path.chmod(_DIR_MODE)


class DuplicateEffect(StintError):
    """The journal already holds an effect with this step key; nothing was appended."""


class EffectJournal:
    """Journals under ``root``: ``<root>/<session_id>.journal``, one JSON line per effect."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._root_made = False

    def _make_root(self) -> None:
        """The folder, private, made once per journal object (not per append: a
        mkdir, a stat and maybe a chmod on every effect add up at 1,000 turns/s)."""
        if not self._root_made:
            private_dir(self.root)
            self._root_made = True

    def path_for(self, session_id: UUID) -> Path:
        return self.root / f"{session_id}.journal"

    def lookup(self, session_id: UUID, key: str) -> dict[str, Any] | None:
        """The recorded effect with this key, or None when it never happened."""
        path = self.path_for(session_id)
        if not path.exists():
            return None
        with path.open("rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            return _find(handle.read(), key)

    def sessions(self) -> Iterator[UUID]:
        """The sessions that have a journal here."""
        if not self.root.is_dir():
            return
        for path in self.root.glob("*.journal"):
            try:
                yield UUID(path.stem)
            except ValueError:
                continue  # not one of ours

    def quiet_sessions(self, *, quiet_seconds: float) -> Iterator[UUID]:
        """The sessions whose journal had nothing appended for ``quiet_seconds``: the
        only ones retention may remove, so the only ones it asks the database about.
        Read without the lock; ``remove_if_quiet`` decides again under it."""
        horizon = time.time() - quiet_seconds
        for session_id in self.sessions():
            try:
                if self.path_for(session_id).stat().st_mtime <= horizon:
                    yield session_id
            except FileNotFoundError:
                continue  # removed since the listing

    def remove_if_quiet(self, session_id: UUID, *, quiet_seconds: float) -> bool:
        """Remove the session's journal if nothing was appended to it for
        ``quiet_seconds``; under the append lock, so no append is lost."""
        path = self.path_for(session_id)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if time.time() - os.fstat(fd).st_mtime < quiet_seconds or not _same_file(fd, path):
                return False
            path.unlink()
        finally:
            os.close(fd)
        _fsync_dir(self.root)
        return True

    def entries(self, session_id: UUID) -> list[dict[str, Any]]:
        """Every effect of a session, in append order (for checkers)."""
        path = self.path_for(session_id)
        if not path.exists():
            return []
        return [json.loads(line) for line in _complete_lines(path.read_bytes())]

    def append(self, session_id: UUID, key: str, record: dict[str, Any]) -> dict[str, Any]:
        """Append one effect and fsync it; raise DuplicateEffect if the key exists."""
        self._make_root()
        path = self.path_for(session_id)
        line = {"key": key, **record}
        data = (json.dumps(line, separators=(",", ":"), sort_keys=True) + "\n").encode()
        fd = _open_locked(path)
        try:
            if os.fstat(fd).st_mode & 0o777 != _FILE_MODE:  # umask, or an older file
                os.fchmod(fd, _FILE_MODE)
            existing = os.pread(fd, os.fstat(fd).st_size, 0)
            if _find(existing, key) is not None:
                raise DuplicateEffect(f"effect {key!r} is already in {path.name}")
            new_file = not existing
            # A torn last line (crash or full disk mid-write) is cut off first.
            complete = existing.rfind(b"\n") + 1
            if complete != len(existing):
                os.ftruncate(fd, complete)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, complete)
                raise
        finally:
            os.close(fd)
        if new_file:
            _fsync_dir(self.root)
        return line


def _same_file(fd: int, path: Path) -> bool:
    """Is the open file still the one at ``path`` (not removed or replaced)?"""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _open_locked(path: Path) -> int:
    """Open ``path`` for appending, holding its exclusive lock; if retention
    removed it while we waited for the lock, open the new one instead."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, _FILE_MODE)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _same_file(fd, path):
            return fd
        os.close(fd)


def _complete_lines(content: bytes) -> list[bytes]:
    """Lines that end in a newline; a torn tail was never a committed effect."""
    return [line for line in content.split(b"\n")[:-1] if line.strip()]


def _find(content: bytes, key: str) -> dict[str, Any] | None:
    # Every line was written by ``append`` with json.dumps' defaults for strings, so
    # a key whose encoding is nowhere in the file is in no line: no line parsed.
    if json.dumps(key).encode() not in content:
        return None
    for raw in _complete_lines(content):
        entry: dict[str, Any] = json.loads(raw)
        if entry.get("key") == key:
            return entry
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
