"""The expanded SQL of every statement is committed (docs/reference/sql) and current.

Statements are assembled from fragments (the lease fence, the event log's owner,
the claim): a review of a fragment's change must show what each statement now
sends. ``make sql-reference`` rewrites the copies; ``make sql NAME=...`` prints one.
"""

from __future__ import annotations

from pathlib import Path

from stint.store.queries import expanded_file, fragments, statements

FOLDER = Path(__file__).resolve().parents[2] / "docs" / "reference" / "sql"


def test_every_statement_has_its_current_expanded_copy() -> None:
    stale = [
        n
        for n in statements()
        if not (FOLDER / f"{n}.sql").exists()
        or (FOLDER / f"{n}.sql").read_text() != expanded_file(n)
    ]
    assert not stale, f"run `make sql-reference`: stale or missing {stale}"


def test_no_copy_of_a_statement_that_is_gone_or_a_fragment() -> None:
    extra = sorted({p.stem for p in FOLDER.glob("*.sql")} - set(statements()))
    assert not extra, f"run `make sql-reference`: copies of no statement {extra}"
    assert not fragments() & set(statements())
    assert {"lease_fence", "log_append", "claim_candidates"} <= fragments()
