"""Dashboard sign-in under attack (issue 22, finding 7): login CSRF, the key in
the cookie, Host reflection, a key in the access log. Real API processes and
PostgreSQL; the cookie's Secure rule is judged by the function the route uses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio

from stint.api.dashboard.login import cookie_secure
from stint.config.settings import Settings
from stint.postgres.scratch import ScratchTarget
from stint.store.keys import parse_token
from stint.store.pool import Pool
from tests.api.conftest import ApiServer, start_api
from tests.dashboard.conftest import Tokens, sign_in
from tests.workers import fetch


async def test_another_sites_form_cannot_sign_a_browser_in(
    dashboard_api: ApiServer, tokens: Tokens
) -> None:
    """Before: a page on another site posted its own key to /dashboard/login and the
    victim's browser got the cookie (it then worked in the attacker's tenant)."""
    async with httpx.AsyncClient(base_url=dashboard_api.base_url) as victim:
        forged = await victim.post(
            "/dashboard/login",
            data={"key": tokens.other, "next": "/dashboard/"},
            headers={"Origin": "https://evil.example"},
        )
        assert forged.status_code == 403
        assert "stint_dashboard=" not in forged.headers.get("set-cookie", "")
        no_token = await victim.post("/dashboard/login", data={"key": tokens.other})
        assert no_token.status_code == 403
        # With this page's token but from another origin: refused too.
        page = await victim.get("/dashboard/login")
        login = page.text.split('name="login" value="', 1)[1].split('"', 1)[0]
        cross = await victim.post(
            "/dashboard/login",
            data={"key": tokens.other, "login": login},
            headers={"Origin": "https://evil.example"},
        )
        assert cross.status_code == 403
        assert "stint_dashboard" not in victim.cookies
        assert (await victim.get("/dashboard/sessions")).status_code == 303  # not signed in


async def test_the_cookie_holds_a_revocable_expiring_session_not_the_key(
    dashboard_api: ApiServer, tokens: Tokens, pool: Pool
) -> None:
    """Before: the cookie held the full API key."""
    async with httpx.AsyncClient(base_url=dashboard_api.base_url) as browser:
        assert (await sign_in(browser, tokens.acme)).status_code == 303
        cookie = browser.cookies["stint_dashboard"]
        key = parse_token(tokens.acme)
        assert key is not None
        assert tokens.acme not in cookie and key[1] not in cookie
        assert cookie.startswith("sds_")
        rows = await fetch(
            pool,
            "SELECT key_id, length(secret_hash) FROM dashboard_sessions WHERE id = %s",
            cookie.split("_")[1],
        )
        assert [(r[0], r[1]) for r in rows] == [(key[0], 32)]
        assert (await browser.get("/dashboard/sessions")).status_code == 200
        page = await browser.get("/dashboard/sessions")
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        out = await browser.post("/dashboard/logout", data={"csrf": csrf})
        assert out.status_code == 303
    async with httpx.AsyncClient(
        base_url=dashboard_api.base_url, cookies={"stint_dashboard": cookie}
    ) as replay:
        assert (await replay.get("/dashboard/sessions")).status_code == 303  # revoked
    async with httpx.AsyncClient(base_url=dashboard_api.base_url) as browser:
        await sign_in(browser, tokens.acme)
        second = browser.cookies["stint_dashboard"]
        await fetch(
            pool,
            "UPDATE dashboard_sessions SET created_at = created_at - interval '2 hours', "
            "expires_at = created_at - interval '1 hour' WHERE id = %s RETURNING id",
            second.split("_")[1],
        )
        assert (await browser.get("/dashboard/sessions")).status_code == 303  # expired


async def test_no_host_reflection_in_redirects(dashboard_api: ApiServer) -> None:
    """Before: /dashboard and /v1/sessions/ redirected to http://<Host header>/..."""
    async with httpx.AsyncClient(base_url=dashboard_api.base_url) as client:
        for path in ("/dashboard", "/v1/sessions/", "/dashboard/sessions"):
            got = await client.get(path, headers={"Host": "evil.example"})
            assert "evil.example" not in got.headers.get("location", ""), (path, got.headers)
        root = await client.get("/dashboard")
        assert root.status_code == 303 and root.headers["location"] == "/dashboard/"


@pytest_asyncio.fixture(loop_scope="session")
async def logging_api(db: ScratchTarget, tmp_path: Path) -> AsyncIterator[ApiServer]:
    server = await start_api(db, tmp_path / "api.log", STINT_LOG_LEVEL="debug")
    try:
        yield server
    finally:
        server.stop()


async def test_a_key_in_a_query_string_never_reaches_the_log(
    logging_api: ApiServer, tokens: Tokens
) -> None:
    """Before: the access log printed a key sent as ?key=... verbatim."""
    async with httpx.AsyncClient(base_url=logging_api.base_url) as client:
        await client.get("/v1/status", params={"api_key": tokens.acme})
        await client.get("/dashboard/login", params={"key": tokens.operator})
        await sign_in(client, tokens.acme)
    key = parse_token(tokens.acme)
    assert key is not None
    text = logging_api.log_text()
    assert "/v1/status?api_key=stk_" in text  # the access log saw the request
    assert key[1] not in text and tokens.operator not in text
    for cookie_secret in (c for c in text.split() if c.startswith("sds_")):
        assert cookie_secret.endswith("****"), cookie_secret


def test_the_cookie_is_secure_by_default_beyond_loopback() -> None:
    assert not cookie_secure(Settings(api_host="127.0.0.1"), "http")
    assert not cookie_secure(Settings(api_host="::1"), "http")
    assert not cookie_secure(Settings(api_host="localhost"), "http")
    assert cookie_secure(Settings(api_host="0.0.0.0"), "http")
    assert cookie_secure(Settings(api_host="10.1.2.3"), "http")
    assert cookie_secure(Settings(api_host="127.0.0.1"), "https")
    assert not cookie_secure(Settings(api_host="0.0.0.0", dashboard_insecure_cookie=True), "http")


async def test_a_form_post_without_a_sign_in_is_turned_away_before_its_body(
    dashboard_api: ApiServer,
) -> None:
    """A dashboard write (answer, cancel) without a live session is sent to sign in
    from its headers: a 1 MB body announced but never sent is not waited for."""
    reader, writer = await asyncio.open_connection("127.0.0.1", dashboard_api.port)
    try:
        writer.write(
            b"POST /dashboard/sessions/00000000-0000-0000-0000-000000000000/answer HTTP/1.1\r\n"
            b"Host: x\r\nCookie: stint_dashboard=sds_0000000000000000_nope\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n["
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=60)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 303"), head
    assert b"location: /dashboard/login?next=/dashboard/" in head.lower()
