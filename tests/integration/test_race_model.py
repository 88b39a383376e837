"""The store protocol under a model-based race test (STYLE §17), on real PostgreSQL.

Hypothesis chooses the moves of two workers and two clients and the order in
which their statements reach PostgreSQL (``race_model``); every invariant is
checked after every move. ``make test`` runs a bounded, derandomized set of
examples; the long run (docs/reliability.md) sets ``STINT_RACE_EXAMPLES``:

    STINT_RACE_EXAMPLES=2000 .venv/bin/pytest tests/integration/test_race_model.py -p no:randomly
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from tests.integration.race_model import Race

_EXAMPLES = int(os.environ.get("STINT_RACE_EXAMPLES", "30"))
_LONG = "STINT_RACE_EXAMPLES" in os.environ
_STEPS = int(os.environ.get("STINT_RACE_STEPS", "40"))


@pytest_asyncio.fixture(loop_scope="session")
async def race(db: ScratchTarget, pool: Pool, tmp_path: Path) -> AsyncIterator[Race]:
    made = Race(db, pool, tmp_path / "journals")
    await made.open()
    try:
        yield made
    finally:
        await made.close()


@pytest.mark.timeout(0 if _LONG else 600)
@settings(
    max_examples=_EXAMPLES,
    deadline=None,
    derandomize=not _LONG,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.generate, Phase.shrink],
)
@given(data=st.data())
async def test_the_store_protocol_keeps_its_invariants_under_any_interleaving(
    race: Race, data: st.DataObject
) -> None:
    await race.reset()
    try:
        await race.run(data, _STEPS)
    finally:
        await race.stop_calls()
