"""Every statement that locks or writes inside a WITH is audited for READ COMMITTED.

Under READ COMMITTED a lock that waited re-reads only the locked row; the
statement's other reads keep the snapshot taken before the wait (docs/design.md,
"Statements under concurrency"). Each such statement must be on that page's
list with the reason it is safe, and must say why in its own comment, so a new
one cannot slip in unreviewed.
"""

from __future__ import annotations

import re
from pathlib import Path

from stint.store.queries import query, raw_sections

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"

_LEADING_COMMENTS = re.compile(r"\A(\s*--[^\n]*\n)*\s*", re.MULTILINE)
_LOCK = re.compile(r"\bFOR\s+(UPDATE|SHARE|NO\s+KEY\s+UPDATE|KEY\s+SHARE)\b", re.IGNORECASE)
_WRITE = re.compile(r"\b(UPDATE\s+\w+(\s+\w+)?\s+SET|INSERT\s+INTO|DELETE\s+FROM)\b", re.I)


def _body(name: str) -> str:
    return _LEADING_COMMENTS.sub("", query(name), count=1)


def concurrent_statements() -> set[str]:
    """Statements (not fragments) that are a WITH and lock or write in it."""
    found = set()
    for name, raw in raw_sections().items():
        if raw.lstrip().startswith("-- Fragment"):
            continue
        body = _body(name)
        if not re.match(r"WITH\b", body, re.IGNORECASE):
            continue
        if _LOCK.search(body) or _WRITE.search(body):
            found.add(name)
    return found


def audited() -> dict[str, str]:
    """The design page's list: statement name -> why it is safe."""
    text = DESIGN.read_text()
    section = text.split("## Statements under concurrency", 1)[1].split("\n## ", 1)[0]
    listed = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            for name in re.findall(r"`([a-z_]+)`", cells[0]):
                listed[name] = cells[2]
    return listed


def test_every_statement_that_locks_or_writes_in_a_with_is_on_the_audited_list() -> None:
    found, listed = concurrent_statements(), audited()
    assert found, "the scan found no statement at all: the scan is broken"
    missing = sorted(found - set(listed))
    assert not missing, (
        f"statements that lock or write in a WITH but are not audited in docs/design.md: "
        f"{missing}; add each with the reason it is safe under READ COMMITTED"
    )
    stale = sorted(set(listed) - found)
    assert not stale, f"docs/design.md audits statements that no longer lock or write: {stale}"
    assert all(reason for reason in listed.values())


def test_every_audited_statement_says_why_in_its_own_comment() -> None:
    silent = sorted(name for name in concurrent_statements() if "READ COMMITTED" not in query(name))
    assert not silent, f"statements without a READ COMMITTED comment: {silent}"


def test_the_scan_sees_a_new_unaudited_statement() -> None:
    """The guard itself: a lock in one CTE and a read in another is found."""
    text = "WITH held AS (SELECT id FROM sessions FOR UPDATE), n AS (SELECT 1) SELECT 1"
    assert re.match(r"WITH\b", text) and _LOCK.search(text)
    assert _WRITE.search("WITH a AS (UPDATE sessions s SET x = 1) SELECT 1")
    assert _WRITE.search("WITH a AS (UPDATE turns SET status = 'x') SELECT 1")
