from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from stint.worker.journal import DuplicateEffect, EffectJournal


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
