"""No third-party script on the API's origin, and a CSP on every HTML page
(issue 22, finding 4: /docs loaded an unpinned swagger-ui script from a CDN,
with no integrity hash or CSP, on the origin that holds the dashboard's
sign-in cookie)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

import stint.api.dashboard
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from tests.api.conftest import ApiServer
from tests.dashboard.conftest import Tokens, sign_in

_OUTSIDE = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)


def _assert_own_page(page: httpx.Response) -> None:
    assert page.headers["content-type"].startswith("text/html"), page.url
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp, page.url
    assert not _OUTSIDE.search(page.text), page.url


async def test_no_interactive_docs_and_a_csp_on_every_html_page(
    dashboard_api: ApiServer, tokens: Tokens, db: ScratchTarget, pool: Pool
) -> None:
    session_id = await ClientStore(db.config, pool).sessions_create(tenant="acme")
    async with httpx.AsyncClient(base_url=dashboard_api.base_url, timeout=30) as client:
        assert (await client.get("/docs")).status_code == 404
        assert (await client.get("/docs/oauth2-redirect")).status_code == 404
        assert (await client.get("/openapi.json")).json()["info"]["title"] == "Stint"
        _assert_own_page(await client.get("/dashboard/login"))
        signed = await sign_in(client, tokens.operator)
        assert signed.status_code == 303
        pages = [
            "/dashboard/overview",
            "/dashboard/workers",
            "/dashboard/sessions",
            f"/dashboard/sessions/{session_id}",
            f"/dashboard/sessions/{session_id}/panels",
            "/dashboard/sessions/00000000-0000-0000-0000-000000000000",
        ]
        for path in pages:
            _assert_own_page(await client.get(path))
    async with httpx.AsyncClient(base_url=dashboard_api.base_url, timeout=30) as tenant:
        await sign_in(tenant, tokens.acme)
        forbidden = await tenant.get("/dashboard/workers")
        assert forbidden.status_code == 403
        _assert_own_page(forbidden)


def test_no_template_or_static_file_loads_anything_from_elsewhere() -> None:
    package = Path(stint.api.dashboard.__file__).parent
    files = [p for p in package.rglob("*") if p.suffix in {".html", ".js", ".css"}]
    assert files
    for path in files:
        text = path.read_text()
        assert not _OUTSIDE.search(text), path
        assert "@import" not in text and "url(http" not in text, path
