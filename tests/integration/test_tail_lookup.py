"""``stint tail --follow`` waits out a connection lost during its first lookups.

Once following, the follower resumes through outages (tests/acceptance/test_cli.py);
before, a lost connection while it looked the session up ended it with exit 3. The
test runs the command in this process with an interleaving gate (stint.store.interleave)
that, at the first ``sessions_find``, terminates the command's connection just before
the statement is sent: the lookup fails as it would when PostgreSQL restarts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest_asyncio

from stint.config.settings import load_settings
from stint.ops.cli import build_parser, cmd_tail
from stint.postgres.scratch import ScratchTarget
from stint.store.config import ROLE_BACKGROUND, ROLE_CLI
from stint.store.interleave import install_gate, remove_gate
from stint.store.pool import Pool, open_pool
from tests.polling import wait_until
from tests.workers import fetch


@pytest_asyncio.fixture(loop_scope="session")
async def admin(db: ScratchTarget) -> AsyncIterator[Pool]:
    """A pool under another application name than the command's, so terminating the
    command's connections spares this one."""
    opened = await open_pool(db.config, ROLE_BACKGROUND, min_size=1, max_size=1)
    try:
        yield opened
    finally:
        await opened.close()


async def test_tail_follow_waits_out_a_connection_lost_in_its_first_lookup(
    db: ScratchTarget, admin: Pool
) -> None:
    [(session_id,)] = await fetch(admin, "INSERT INTO sessions DEFAULT VALUES RETURNING id")
    sent: list[str] = []

    async def gate(name: str) -> None:
        if name == "sessions_find" and "sessions_find" not in sent:
            terminated = await fetch(
                admin,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE application_name = '{ROLE_CLI}'",
            )
            assert terminated == [(True,)]
        sent.append(name)

    settings = load_settings(database_url=db.conninfo, db_schema=db.config.schema)
    args = build_parser().parse_args(["tail", str(session_id), "--follow"])
    token = install_gate(gate)
    try:
        tail = asyncio.create_task(cmd_tail(settings, args))
    finally:
        remove_gate(token)
    try:

        async def following() -> bool:
            if tail.done():  # ended instead of waiting the outage out: show why
                tail.result()
            return "events_after" in sent

        await wait_until(following, what="the follower catching up after its lookups")
        assert sent[:3] == ["sessions_find", "sessions_find", "events_bounds"]
        assert not tail.done()
    finally:
        tail.cancel()
        await asyncio.gather(tail, return_exceptions=True)
