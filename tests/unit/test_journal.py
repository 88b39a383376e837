from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest

from stint.worker.journal import DuplicateEffect, EffectJournal, private_dir


def test_append_then_lookup(tmp_path: Path) -> None:
    journal = EffectJournal(tmp_path / "j")
    sid = uuid.uuid4()
    journal.append(sid, "k1", {"n": 1})
    assert journal.lookup(sid, "k1") == {"key": "k1", "n": 1}
    assert journal.lookup(sid, "k2") is None


def test_second_line_with_same_key_is_refused(tmp_path: Path) -> None:
    journal = EffectJournal(tmp_path)
    sid = uuid.uuid4()
    journal.append(sid, "k1", {"n": 1})
    with pytest.raises(DuplicateEffect):
        journal.append(sid, "k1", {"n": 2})
    assert [e["n"] for e in journal.entries(sid)] == [1]


def test_torn_tail_is_not_an_effect_and_is_cut(tmp_path: Path) -> None:
    journal = EffectJournal(tmp_path)
    sid = uuid.uuid4()
    journal.append(sid, "k1", {"n": 1})
    with journal.path_for(sid).open("ab") as handle:
        handle.write(b'{"key":"k2","n"')  # a crash in the middle of a write
    assert journal.lookup(sid, "k2") is None
    journal.append(sid, "k2", {"n": 2})
    assert [e["key"] for e in journal.entries(sid)] == ["k1", "k2"]


def test_journal_files_are_0600_in_0700_folders_whatever_the_umask(tmp_path: Path) -> None:
    root = tmp_path / "ws" / "journals"
    old = os.umask(0)
    try:
        journal = EffectJournal(root)
        sid = uuid.uuid4()
        journal.append(sid, "k1", {"n": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE(journal.path_for(sid).stat().st_mode) == 0o600


def test_a_wider_folder_and_file_from_before_are_narrowed(tmp_path: Path) -> None:
    root = tmp_path / "journals"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    sid = uuid.uuid4()
    journal = EffectJournal(root)
    journal.path_for(sid).write_text('{"key":"k0"}\n')
    journal.path_for(sid).chmod(0o644)
    journal.append(sid, "k1", {"n": 1})
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE(journal.path_for(sid).stat().st_mode) == 0o600


def test_a_shared_folder_of_another_owner_is_used_as_its_owner_set_it(tmp_path: Path) -> None:
    # A container's workspace volume, mounted 0777 and owned by root, used by uid 10001.
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another owner needs root")
    shared = tmp_path / "workspace"
    shared.mkdir()
    shared.chmod(0o777)
    os.chown(shared, 10001, -1)
    private_dir(shared)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o777
    journal = EffectJournal(shared / "journals")
    sid = uuid.uuid4()
    journal.append(sid, "k1", {"n": 1})
    assert stat.S_IMODE((shared / "journals").stat().st_mode) == 0o700
    assert stat.S_IMODE(journal.path_for(sid).stat().st_mode) == 0o600


def test_quiet_sessions_are_those_with_nothing_appended_for_the_horizon(tmp_path: Path) -> None:
    journal = EffectJournal(tmp_path)
    quiet, busy = uuid.uuid4(), uuid.uuid4()
    journal.append(quiet, "k", {})
    journal.append(busy, "k", {})
    long_ago = journal.path_for(quiet).stat().st_mtime - 3600
    os.utime(journal.path_for(quiet), (long_ago, long_ago))
    (tmp_path / "notes.journal").write_text("not a session's\n")
    assert set(journal.sessions()) == {quiet, busy}
    assert list(journal.quiet_sessions(quiet_seconds=600)) == [quiet]
    assert set(journal.quiet_sessions(quiet_seconds=0)) == {quiet, busy}
