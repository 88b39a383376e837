from __future__ import annotations

import re

import pytest

from stint.store.errors import ConfigError
from stint.store.queries import _expand, parse_sections, query, raw_sections


def test_sections_are_split_by_name() -> None:
    text = "-- name: a\nSELECT 1\n\n-- name: b\nSELECT 2\n"
    assert parse_sections(text, source="x.sql") == {"a": "SELECT 1", "b": "SELECT 2"}


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ConfigError, match="duplicate"):
        parse_sections("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", source="x.sql")


def test_includes_are_expanded() -> None:
    body = query("events_append")
    assert "/*include:" not in body
    assert "INSERT INTO events" in body


def test_unknown_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no SQL statement"):
        query("no_such_statement")


def test_include_cycles_are_refused() -> None:
    sections = {"a": "x /*include:b*/", "b": "y /*include:a*/"}
    with pytest.raises(ConfigError, match="cycle"):
        _expand(sections["a"], sections)


# The event log has one owner: the fragments log_reserve (the seq bump) and
# log_append (the insert). Any other statement writing either would be free to
# break the contiguous-cursor invariant, so this test refuses it.
_ASSIGNS_SEQ = re.compile(r"\blast_event_seq\s*=(?!=)", re.IGNORECASE)
_WRITES_EVENTS = re.compile(
    r"\b(insert\s+into|update|truncate|copy)\s+(\w+\.)?events\b", re.IGNORECASE
)
_DELETES_EVENTS = re.compile(r"\bdelete\s+from\s+(\w+\.)?events\b", re.IGNORECASE)
_MOVES_PRUNED_HEAD = re.compile(r"\bevents_pruned_through\s*=(?!=)", re.IGNORECASE)


def _code(body: str) -> str:
    """The statement without its ``--`` comments (which may name what they describe)."""
    return "\n".join(line.split("--", 1)[0] for line in body.splitlines())


def test_only_the_log_fragments_write_the_event_log() -> None:
    sections = raw_sections()
    seq_writers = {n for n, body in sections.items() if _ASSIGNS_SEQ.search(_code(body))}
    event_writers = {n for n, body in sections.items() if _WRITES_EVENTS.search(_code(body))}
    assert seq_writers == {"log_reserve"}
    assert event_writers == {"log_append"}


def test_only_retention_removes_events_and_only_from_the_head() -> None:
    """Removing events is retention's alone: the fragment that cuts each log's
    head and the statements that record how far (so logs stay contiguous)."""
    sections = raw_sections()
    deleters = {n for n, body in sections.items() if _DELETES_EVENTS.search(_code(body))}
    movers = {n for n, body in sections.items() if _MOVES_PRUNED_HEAD.search(_code(body))}
    assert deleters == {"prune_head_of_logs"}
    assert movers == {"prune_events", "prune_turns"}
    including = {n for n in sections if "/*include:prune_head_of_logs*/" in sections[n]}
    assert including == movers


_FRAGMENTS = {"log_reserve", "log_append", "log_bump_fenced", "log_new_from_params"}


def test_every_statement_that_appends_also_reserves() -> None:
    statements = set(raw_sections()) - _FRAGMENTS
    appending = {n for n in statements if "INSERT INTO events" in query(n)}
    reserving = {n for n in statements if query("log_reserve") in query(n)}
    assert appending == reserving
    assert {"turns_claim", "turns_finish", "turns_park", "sessions_release"} <= appending
    assert {"controls_end_queued", "controls_end_turn", "answers_record"} <= appending
    assert {"events_append", "steps_start", "steps_finish"} <= appending


def test_the_write_checks_catch_a_hand_written_insert() -> None:
    rogue = (
        "WITH x AS (INSERT INTO events (session_id) VALUES (1)) "
        "UPDATE sessions SET last_event_seq = 2"
    )
    assert _WRITES_EVENTS.search(_code(rogue))
    assert _ASSIGNS_SEQ.search(_code(rogue))


_SPELLED_FENCE = re.compile(
    r"lease_owner\s*=\s*%\(owner\)s\s+AND\s+lease_epoch\s*=\s*%\(epoch\)s", re.IGNORECASE
)


def test_the_lease_fence_is_written_once() -> None:
    """Every fenced write matches the session row through the one fragment, so
    the fence cannot drift between statements (it was spelled out six times)."""
    sections = raw_sections()
    spelled = {n for n, body in sections.items() if _SPELLED_FENCE.search(_code(body))}
    assert spelled == {"lease_fence"}
    fenced = {n for n in sections if "/*include:lease_fence*/" in sections[n]}
    assert {"turns_finish", "turns_park", "turns_defer", "sessions_release"} <= fenced
    assert {"log_bump_fenced", "messages_append"} <= fenced


_WRITES_OUTBOX = re.compile(r"\binsert\s+into\s+(\w+\.)?webhook_deliveries\b", re.IGNORECASE)


def test_the_webhook_outbox_is_written_by_the_event_log_writer_only() -> None:
    """An event and its deliveries commit together because the one statement that
    appends events is the only one that adds deliveries (docs/design.md, "Webhooks")."""
    sections = raw_sections()
    writers = {n for n, body in sections.items() if _WRITES_OUTBOX.search(_code(body))}
    assert writers == {"log_append"}
    appending = {n for n in set(sections) - _FRAGMENTS if "INSERT INTO events" in query(n)}
    assert appending
    assert all("INSERT INTO webhook_deliveries" in query(n) for n in appending)
