"""The API's /metrics (operator key, or public by setting; no tenant anywhere in it)
and the W3C traceparent header stored with the turn it queues."""

from __future__ import annotations

from pathlib import Path

import httpx

from stint.postgres.scratch import ScratchTarget
from stint.store.keys import KeyStore
from stint.store.pool import Pool
from tests.api.conftest import ApiServer, Keys, bearer, start_api
from tests.scrape import parse, value
from tests.workers import fetch

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_metrics_need_an_operator_key_and_name_no_tenant(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, db: ScratchTarget, pool: Pool
) -> None:
    operator = (await KeyStore(db.config, pool).keys_create(tenant="ops", operator=True)).token
    created = await http.post("/v1/sessions", headers=bearer(keys.a), json={})
    session_id = created.json()["id"]
    await http.get(f"/v1/sessions/{session_id}", headers=bearer(keys.a))
    assert (await http.get("/metrics")).status_code == 401
    assert (await http.get("/metrics", headers=bearer(keys.a))).status_code == 403
    assert (await http.get("/metrics", headers=bearer(keys.revoked))).status_code == 401
    answer = await http.get("/metrics", headers=bearer(operator))
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    page = parse(answer.text)
    route = "/v1/sessions/{session_id}"
    assert value(page, "stint_api_requests_total", method="GET", route=route, status="200") == 1
    assert value(
        page, "stint_api_requests_total", method="POST", route="/v1/sessions", status="201"
    )
    assert value(page, "stint_api_event_streams") == 0
    # Labels carry route templates: no session id, tenant or key reaches a scraper.
    for secret in (session_id, "tenant", keys.a, operator):
        assert secret not in answer.text
    assert '"a"' not in answer.text and '"ops"' not in answer.text


async def test_metrics_may_be_public_by_setting(db: ScratchTarget, tmp_path: Path) -> None:
    server = await start_api(db, tmp_path / "api.log", STINT_API_METRICS_PUBLIC="true")
    try:
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            answer = await client.get("/metrics")
        assert answer.status_code == 200 and "stint_api_requests_total" in answer.text
    finally:
        assert server.stop() == 0


async def test_the_traceparent_header_is_stored_with_the_turn(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    session_id = (await http.post("/v1/sessions", headers=bearer(keys.a), json={})).json()["id"]
    for header in (TRACEPARENT, "not a trace context", "00-" + "0" * 32 + "-00f067aa0ba902b7-01"):
        queued = await http.post(
            f"/v1/sessions/{session_id}/turns",
            headers={**bearer(keys.a), "traceparent": header},
            json={"input": {"gate": "never"}},
        )
        assert queued.status_code == 201, queued.text
    rows = await fetch(
        pool, "SELECT traceparent FROM turns WHERE session_id = %s ORDER BY seq", session_id
    )
    # A valid context is kept; an invalid one is ignored (the W3C rule), never refused.
    assert [r[0] for r in rows] == [TRACEPARENT, None, None]
