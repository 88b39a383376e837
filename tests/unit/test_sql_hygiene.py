"""No SQL is spliced from strings: not in Stint, not in its tests.

Stint's statements live in ``stint/store/sql``; names are composed with
``psycopg.sql.Identifier`` and values bound as parameters. A test that builds
SQL with an f-string would teach the habit the store refuses, so this guard
reads every Python file for an f-string that starts like a statement.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_FSTRING_SQL = re.compile(
    r"""\bf(["']{1,3})\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|WITH|SHOW|TRUNCATE)\b""",
    re.IGNORECASE,
)


def _offenders() -> list[str]:
    found = []
    for folder in ("stint", "tests", "loadtest"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue  # its own examples
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if _FSTRING_SQL.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_python_file_builds_sql_with_an_f_string() -> None:
    assert _offenders() == []


def test_the_guard_sees_an_f_string_statement() -> None:
    assert _FSTRING_SQL.search('rows = fetch(pool, f"SELECT count(*) FROM {table}")')
    assert _FSTRING_SQL.search("x = f'''\n") is None
    assert _FSTRING_SQL.search('message = f"select a key first: {key}"')  # conservative
