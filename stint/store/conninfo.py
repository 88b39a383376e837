"""Database URLs and conninfo strings: parsed once, at start, and never echoed.

psycopg and psycopg_pool log libpq's parse errors as they are, and those quote
the text, password included. So every connection string is parsed here first,
with psycopg's conninfo parser (libpq's own), and a malformed one becomes a
``ConfigError`` that shows the string with its password masked. Nothing that
reaches the driver later can fail to parse, so no driver message quotes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from psycopg.conninfo import conninfo_to_dict

from stint.store.errors import ConfigError
from stint.store.redaction import password_candidate, redact
from stint.store.translate import conninfo_parsing

__all__ = ["ParsedConninfo", "parse_conninfo"]

_URL_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://")
_POSTGRES_SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True)
class ParsedConninfo:
    """A connection string libpq accepts; ``shown`` is what may be printed of it."""

    conninfo: str = field(repr=False)
    password: str | None = field(repr=False)
    shown: str


def parse_conninfo(text: str, *, source: str = "STINT_DATABASE_URL") -> ParsedConninfo:
    """Check ``text`` with libpq's parser; refuse it with a redacted message if malformed.

    Accepts ``postgresql://`` / ``postgres://`` URLs and ``key=value`` conninfo
    strings. A refusal names ``source`` and libpq's reason, and shows the text
    with its password masked; never the raw text.
    """
    stripped = text.strip()
    shown = redact(stripped)
    scheme = _URL_SCHEME.match(stripped)
    if scheme and scheme["scheme"].lower() not in _POSTGRES_SCHEMES:
        raise ConfigError(
            f"{source} must be a postgresql:// URL or a key=value conninfo string; "
            f"{scheme['scheme']}:// is not PostgreSQL's scheme",
            given=shown,
        )
    with conninfo_parsing(source, shown=shown, password=password_candidate(stripped)):
        params = conninfo_to_dict(stripped)
    password = params.get("password")
    return ParsedConninfo(
        conninfo=stripped, password=None if password is None else str(password), shown=shown
    )
