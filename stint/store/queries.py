"""Named SQL statements, loaded once from the ``.sql`` files beside this module.

Each file holds sections introduced by ``-- name: <statement_name>``; the text up
to the next marker is the statement. Keeping SQL in files (never in f-strings)
makes every query greppable and reviewable as SQL, and lets the schema live in
``search_path`` instead of being spliced into text.

Statements are written with named placeholders (``%(session_id)s``) and sent
numbered (``$1``), converted once per statement here: psycopg would convert
each execution again, and caches its conversion only for texts under 4 KiB,
which the fused claim and finish statements are not (that re-parse was 40% of
a busy worker's event-loop samples under py-spy, and 0.2 ms of CPU per turn).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, LiteralString

from stint.store.errors import ConfigError

__all__ = ["Numbered", "fragments", "numbered", "query", "raw_sections", "statements"]

_MARKER = re.compile(r"^--\s*name:\s*(?P<name>[a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"/\*include:(?P<name>[a-z_][a-z0-9_]*)\*/")
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def parse_sections(text: str, *, source: str) -> dict[str, str]:
    """Split one ``.sql`` file into its named statements."""
    sections: dict[str, str] = {}
    markers = list(_MARKER.finditer(text))
    for i, marker in enumerate(markers):
        end = markers[i + 1].start() if i + 1 < len(markers) else len(text)
        name = marker.group("name")
        if name in sections:
            raise ConfigError("duplicate SQL statement name", name=name, file=source)
        body = text[marker.end() : end].strip()
        if not body:
            raise ConfigError("empty SQL statement", name=name, file=source)
        sections[name] = body
    return sections


@cache
def _sections() -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in sorted(resources.files("stint.store").joinpath("sql").iterdir(), key=str):
        if not entry.name.endswith(".sql"):
            continue
        for name, body in parse_sections(entry.read_text("utf-8"), source=entry.name).items():
            if name in found:
                raise ConfigError("duplicate SQL statement name", name=name, file=entry.name)
            found[name] = body
    return found


@cache
def _all_queries() -> dict[str, str]:
    found = _sections()
    return {name: _expand(body, found) for name, body in found.items()}


def _expand(body: str, sections: dict[str, str], within: tuple[str, ...] = ()) -> str:
    """Replace ``/*include:name*/`` with that section (a shared fragment), which
    may include others in turn; a fragment that includes itself is refused."""

    def fragment(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in sections:
            raise ConfigError("SQL include names no statement", name=name)
        if name in within:
            raise ConfigError("SQL include cycle", chain=" > ".join((*within, name)))
        return _expand(sections[name], sections, (*within, name))

    return _INCLUDE.sub(fragment, body)


def raw_sections() -> dict[str, str]:
    """Every named section as written, includes not expanded (for tests that
    check who writes what)."""
    return dict(_sections())


def query(name: str) -> LiteralString:
    """Return the statement called ``name``.

    The text comes from files shipped inside this package, never from input, so
    it is as trusted as a literal in the source (hence ``LiteralString``).
    """
    try:
        return _all_queries()[name]
    except KeyError:
        raise ConfigError("no SQL statement with this name", name=name) from None


@dataclass(frozen=True)
class Numbered:
    """A statement as PostgreSQL receives it: ``$n`` placeholders numbered in
    order of first appearance (as psycopg would number them, so
    pg_stat_statements keys it the same) and ``%%`` sent as ``%``."""

    name: str
    text: LiteralString
    names: tuple[str, ...]
    encoded: bytes = b""
    """``text`` as sent (UTF-8), encoded once: psycopg encodes a ``str`` on every execution."""

    def values(self, params: Mapping[str, Any]) -> list[Any] | None:
        """The parameters in placeholder order; None for a statement without any
        (sent as a simple query, so a text of several statements still runs)."""
        if not self.names:
            return None
        try:
            return [params[n] for n in self.names]
        except KeyError:
            missing = [n for n in self.names if n not in params]
            raise ConfigError(
                "SQL parameter not given", statement=self.name, missing=missing
            ) from None


@cache
def numbered(name: str) -> Numbered:
    """Statement ``name`` numbered for sending, converted once."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    # Only placeholders were replaced, by ``$n``: the text is still the shipped file's.
    text: LiteralString = _PLACEHOLDER.sub(number, query(name)).replace("%%", "%")
    return Numbered(name, text, tuple(numbers), text.encode())


def fragments() -> set[str]:
    """Sections that other sections include (not statements of their own)."""
    sections = _sections()
    return {m.group("name") for body in sections.values() for m in _INCLUDE.finditer(body)}


def statements() -> list[str]:
    """Every statement's name (sections that are not fragments), sorted."""
    return sorted(set(_sections()) - fragments())


def _main(argv: list[str]) -> int:
    """``python -m stint.store.queries NAME``: the statement as PostgreSQL receives
    it, includes expanded (``make sql NAME=...``); ``--write DIR``: one file per
    statement (the committed copy in docs/reference/sql, checked by a test)."""
    if len(argv) == 2 and argv[0] == "--write":
        folder = Path(argv[1])
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.sql"):
            old.unlink()
        for name in statements():
            (folder / f"{name}.sql").write_text(expanded_file(name))
        print(f"wrote {len(statements())} statements to {folder}")
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m stint.store.queries NAME | --write DIR", file=sys.stderr)
        return 2
    try:
        print(query(argv[0]))
    except ConfigError as exc:
        print(f"{exc}; statements: {', '.join(statements())}", file=sys.stderr)
        return 2
    return 0


def expanded_file(name: str) -> str:
    """A statement's committed expanded copy: a header, then its full text."""
    return (
        f"-- {name}: generated by `make sql-reference` from stint/store/sql/*.sql; "
        "do not edit\n"
        f"{query(name)}\n"
    )


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
