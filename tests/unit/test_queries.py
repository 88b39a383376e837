from __future__ import annotations

import pytest

from stint.store.errors import ConfigError
from stint.store.queries import parse_sections, query


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
