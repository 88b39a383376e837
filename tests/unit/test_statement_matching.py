"""The probe finds a statement in pg_stat_statements although the server stored
it with its literal constants replaced by $n."""

from __future__ import annotations

from stint.store.probe import _normalized
from stint.store.queries import numbered


def test_a_sent_text_and_its_stored_form_normalise_alike() -> None:
    sent = (
        "-- the session's turns\n"
        "SELECT extract(epoch FROM now() - t.at), $1 FROM turns t\n"
        "WHERE t.status = 'running' AND t.attempts > 1 LIMIT $2"
    )
    stored = (
        "-- the session's turns\n"
        "SELECT extract($3 FROM now() - t.at), $1 FROM turns t\n"
        "WHERE t.status = $4 AND t.attempts > $5 LIMIT $2"
    )
    assert _normalized(sent) == _normalized(stored)
    assert _normalized(sent) != _normalized(stored.replace("turns t", "steps t"))


def test_distinct_store_statements_stay_distinct() -> None:
    names = ["turns_claim", "turns_finish", "steps_start", "steps_finish", "leases_renew"]
    assert len({_normalized(numbered(name).text) for name in names}) == len(names)
