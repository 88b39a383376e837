"""The dashboard's security, over plain HTTP (no browser needed): sign-in, the
cookie's attributes, CSRF, tenants, read-only keys, revocation, escaping."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from uuid import UUID

import httpx

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.keys import KeyStore, parse_token
from stint.store.pool import Pool
from tests.api.conftest import ApiServer
from tests.dashboard.conftest import Tokens, sign_in
from tests.workers import fetch


@asynccontextmanager
async def _signed_in(server: ApiServer, token: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        answer = await sign_in(client, token)
        assert answer.status_code == 303, answer.text
        yield client


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, "no CSRF token on the page"
    return found[1]


async def test_sign_in_sets_a_strict_http_only_cookie(
    dashboard_api: ApiServer, tokens: Tokens
) -> None:
    async with httpx.AsyncClient(base_url=dashboard_api.base_url) as client:
        first = await client.get("/dashboard/sessions")
        assert first.status_code == 303
        assert first.headers["location"] == "/dashboard/login?next=/dashboard/sessions"
        wrong = await sign_in(client, "stk_nope")
        assert wrong.status_code == 401 and "stint_dashboard=" not in wrong.headers["set-cookie"]
        right = await sign_in(client, tokens.acme, "https://evil.example/")
        assert right.status_code == 303
        assert right.headers["location"] == "/dashboard/"  # never an open redirect
        cookie = right.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/dashboard" in cookie
        page = await client.get("/dashboard/sessions")
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert tokens.acme not in page.text  # the key is never written into a page


async def test_tenants_see_their_own_and_operators_every_tenant(
    dashboard_api: ApiServer, tokens: Tokens, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    mine = await client.sessions_create(tenant="acme")
    theirs = await client.sessions_create(tenant="other")
    untenanted = await client.sessions_create()
    async with (
        _signed_in(dashboard_api, tokens.acme) as acme,
        _signed_in(dashboard_api, tokens.operator) as operator,
    ):
        listed = (await acme.get("/dashboard/sessions")).text
        assert str(mine) in listed and str(theirs) not in listed and str(untenanted) not in listed
        # A tenant filter from a tenant's browser changes nothing: its scope is its key's.
        assert str(theirs) not in (await acme.get("/dashboard/sessions?tenant=other")).text
        assert (await acme.get(f"/dashboard/sessions/{theirs}")).status_code == 404
        assert (await acme.get("/dashboard/workers")).status_code == 403
        overview = await acme.get("/dashboard/")
        assert overview.headers["location"] == "/dashboard/sessions"
        everything = (await operator.get("/dashboard/sessions")).text
        assert all(str(s) in everything for s in (mine, theirs, untenanted))
        only_other = (await operator.get("/dashboard/sessions?tenant=other")).text
        assert str(theirs) in only_other and str(mine) not in only_other
        assert (await operator.get(f"/dashboard/sessions/{theirs}")).status_code == 200
        assert (await operator.get("/dashboard/workers")).status_code == 200


async def test_writes_need_the_csrf_token_and_a_writing_key(
    dashboard_api: ApiServer, tokens: Tokens, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    queued = await client.turns_enqueue(
        session_id=None,
        idempotency_key="k",
        turn_input={"gate": "never"},
        tenant="acme",
    )
    page = f"/dashboard/sessions/{queued.session_id}"
    async with (
        _signed_in(dashboard_api, tokens.acme_read_only) as reader,
        _signed_in(dashboard_api, tokens.acme) as writer,
    ):
        html = (await writer.get(page)).text
        token = _csrf(html)
        for form in ({}, {"csrf": "0" * 64}):
            refused = await writer.post(f"{page}/cancel", data=form)
            assert refused.status_code == 403
        reading = (await reader.get(page)).text
        assert "Cancel" not in reading  # no buttons for a read-only key
        refused = await reader.post(f"{page}/cancel", data={"csrf": _csrf(reading)})
        assert refused.status_code == 403
        assert await _controls(pool, queued.session_id) == 0
        done = await writer.post(f"{page}/cancel", data={"csrf": token})
        assert done.status_code == 303 and "queued%20turn" in done.headers["location"]
    status = await fetch(pool, "SELECT status FROM turns WHERE id = %s", queued.turn_id)
    assert status[0][0] == "cancelled"  # queued, not running: cancelled directly


async def _controls(pool: Pool, session_id: UUID) -> int:
    rows = await fetch(
        pool,
        "SELECT count(*) FROM turns WHERE session_id = %s AND status = 'cancelled'",
        session_id,
    )
    return int(rows[0][0])


async def test_a_revoked_key_is_signed_out_and_pages_escape_what_sessions_carry(
    dashboard_api: ApiServer, tokens: Tokens, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    hostile = "<script>alert(1)</script>"
    queued = await client.turns_enqueue(
        session_id=None,
        idempotency_key="x",
        turn_input={"gate": "g"},
        tenant="acme",
    )
    # Rows written here as a worker would: an event carrying markup, and a step
    # whose effect may or may not have happened (flagged in the journal).
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO events (session_id, seq, turn_id, kind, payload)"
            " VALUES (%s, 1, %s, 'message', jsonb_build_object('text', %s::text))",
            (queued.session_id, queued.turn_id, hostile),
        )
        await conn.execute(
            "UPDATE sessions SET last_event_seq = 1 WHERE id = %s", (queued.session_id,)
        )
        await conn.execute(
            "INSERT INTO steps (session_id, turn_id, step_key, kind, status,"
            " request_digest, lease_epoch, finished_at)"
            " VALUES (%s, %s, 'tool-1', 'tool', 'unknown', 'd', 1, now())",
            (queued.session_id, queued.turn_id),
        )
    async with _signed_in(dashboard_api, tokens.acme) as browser:
        page = await browser.get(f"/dashboard/sessions/{queued.session_id}")
        assert hostile not in page.text and "&lt;script&gt;" in page.text
        assert '<tr class="unknown">' in page.text and "unknown effect" in page.text
        parsed = parse_token(tokens.acme)
        assert parsed is not None
        await KeyStore(db.config, pool).keys_revoke(key_id=parsed[0])
        after = await browser.get(f"/dashboard/sessions/{queued.session_id}")
        assert after.status_code == 303 and after.headers["location"].startswith("/dashboard/login")
