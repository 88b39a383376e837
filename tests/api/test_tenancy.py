"""Keys and tenants, for every route the app serves (the list comes from the app).

A key of tenant b gets 404 for everything of tenant a's session and writes
nothing; the same requests with a's key do reach it (so the 404 is the
tenant filter, not a broken route). Read-only keys are refused on every
write; a missing, malformed or revoked key is refused on every /v1 route.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import httpx
import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from stint.store.sealed import WebhookKey
from stint.store.webhooks import WebhookStore, check_endpoint
from tests.api.conftest import Keys, bearer, row_counts
from tests.api.routes import BODIES, NOWHERE, PUBLIC, api_routes, fill

ROUTES = api_routes()
_OWNED = ("{session_id}", "{schedule_id}", "{webhook_id}")
SESSION_ROUTES = [(m, p) for m, p in ROUTES if any(k in p for k in _OWNED)]
COLLECTION_ROUTES = [
    (m, p) for m, p in ROUTES if p.startswith("/v1") and not any(k in p for k in _OWNED)
]
WRITES = [(m, p) for m, p in ROUTES if m != "GET"]


def test_every_route_is_known() -> None:
    assert ROUTES, "the app serves no routes?"
    for method, path in ROUTES:
        assert (method, path) in PUBLIC or path.startswith("/v1/"), (method, path)
        if method != "GET":
            assert (method, path) in BODIES, f"add a body for {method} {path} to tests/api/routes"
    assert {p for _, p in SESSION_ROUTES} >= {
        "/v1/sessions/{session_id}",
        "/v1/sessions/{session_id}/events",
        "/v1/sessions/{session_id}/answers",
        "/v1/sessions/{session_id}/cancel",
    }


_KEY = WebhookKey(base64.b64encode(os.urandom(32)).decode())


async def _owned(
    http: httpx.AsyncClient, keys: Keys, db: ScratchTarget, pool: Pool
) -> dict[str, str]:
    """Tenant a's session with a queued turn, a schedule and a webhook endpoint (made
    through the store: this API has no STINT_WEBHOOK_KEY), as the ids routes take."""
    session_id, turn_id = await _a_session_with_a_turn(http, keys)
    schedule = await http.post(
        "/v1/schedules",
        json={"name": "s", "input": {}, "every_seconds": 60},
        headers=bearer(keys.a),
    )
    assert schedule.status_code == 201, schedule.text
    endpoint, _ = await WebhookStore(db.config, pool).create(
        check_endpoint(
            tenant="a", url="https://e.example/h", kinds=["turn.completed"], description=None
        ),
        key=_KEY,
    )
    return {
        "session_id": session_id,
        "turn_id": turn_id,
        "schedule_id": schedule.json()["id"],
        "webhook_id": str(endpoint.id),
    }


async def _a_session_with_a_turn(http: httpx.AsyncClient, keys: Keys) -> tuple[str, str]:
    created = await http.post("/v1/sessions", json={}, headers=bearer(keys.a))
    assert created.status_code == 201, created.text
    session_id = created.json()["id"]
    queued = await http.post(
        f"/v1/sessions/{session_id}/turns",
        json={"input": {"min_wait_ms": 0}},
        headers=bearer(keys.a),
    )
    assert queued.status_code == 201, queued.text
    return session_id, queued.json()["turn_id"]


async def _call(
    http: httpx.AsyncClient, method: str, path: str, token: str, **params: Any
) -> httpx.Response:
    body = BODIES.get((method, path))
    return await http.request(
        method,
        fill(
            path,
            params["session_id"],
            params["turn_id"],
            schedule_id=params.get("schedule_id", NOWHERE),
            webhook_id=params.get("webhook_id", NOWHERE),
        ),
        json=body,
        params={"format": "json"} if path.endswith("/events") else None,
        headers=bearer(token),
    )


@pytest.mark.parametrize(("method", "path"), SESSION_ROUTES)
async def test_another_tenants_session_is_404_and_nothing_is_written(
    http: httpx.AsyncClient, keys: Keys, pool: Pool, db: ScratchTarget, method: str, path: str
) -> None:
    ids = await _owned(http, keys, db, pool)
    session_id, turn_id = ids["session_id"], ids["turn_id"]
    before = await row_counts(pool)
    theirs = await _call(http, method, path, keys.b, **ids)
    assert theirs.status_code == 404, theirs.text
    assert theirs.headers["content-type"] == "application/problem+json"
    assert '"tenant"' not in theirs.text and "\n" not in theirs.json()["detail"]
    assert await row_counts(pool) == before
    if path.endswith("/events"):  # the stream form is refused before it starts, too
        stream = await http.get(fill(path, session_id, turn_id), headers=bearer(keys.b))
        assert stream.status_code == 404
    ours = await _call(http, method, path, keys.a, **ids)
    # answers: a's own session has no open question (409): found, unlike b's 404.
    assert ours.status_code in (200, 201, 409), ours.text


async def test_collections_show_only_the_callers_tenant(
    http: httpx.AsyncClient, keys: Keys
) -> None:
    assert {p for _, p in COLLECTION_ROUTES} == {
        "/v1/sessions",
        "/v1/status",
        "/v1/schedules",
        "/v1/webhooks",
        "/v1/turns/batch",
    }
    a_session, _ = await _a_session_with_a_turn(http, keys)
    batch = {"turns": [{"session_id": a_session, "input": {}}]}
    refused = await http.post("/v1/turns/batch", json=batch, headers=bearer(keys.b))
    assert refused.status_code == 404, refused.text
    b_created = await http.post("/v1/sessions", json={}, headers=bearer(keys.b))
    assert b_created.status_code == 201 and b_created.json()["tenant"] == "b"
    b_session = b_created.json()["id"]
    for token, mine, theirs in ((keys.a, a_session, b_session), (keys.b, b_session, a_session)):
        listed = await http.get("/v1/sessions", headers=bearer(token))
        ids = [s["id"] for s in listed.json()["sessions"]]
        assert mine in ids and theirs not in ids
    status_b = (await http.get("/v1/status", headers=bearer(keys.b))).json()
    assert status_b["tenant"] == "b" and status_b["sessions"] == {"idle": 1}
    status_a = (await http.get("/v1/status", headers=bearer(keys.a))).json()
    assert status_a["sessions"] == {"ready": 1} and status_a["queued_turns"] == 1
    made = await http.post(
        "/v1/schedules", json=BODIES[("POST", "/v1/schedules")], headers=bearer(keys.a)
    )
    assert made.status_code == 201, made.text
    for token, count in ((keys.a, 1), (keys.b, 0)):
        assert (
            len((await http.get("/v1/schedules", headers=bearer(token))).json()["schedules"])
            == count
        )
        assert (await http.get("/v1/webhooks", headers=bearer(token))).json() == {"webhooks": []}


@pytest.mark.parametrize(("method", "path"), WRITES)
async def test_read_only_keys_are_refused_on_every_write(
    http: httpx.AsyncClient, keys: Keys, pool: Pool, db: ScratchTarget, method: str, path: str
) -> None:
    ids = await _owned(http, keys, db, pool)
    before = await row_counts(pool)
    refused = await _call(http, method, path, keys.a_read_only, **ids)
    assert refused.status_code == 403, refused.text
    assert refused.json()["detail"] == "this API key is read-only"
    assert await row_counts(pool) == before


async def test_read_only_keys_read(
    http: httpx.AsyncClient, keys: Keys, pool: Pool, db: ScratchTarget
) -> None:
    ids = await _owned(http, keys, db, pool)
    for method, path in ROUTES:
        if method == "GET" and path.startswith("/v1"):
            got = await _call(http, method, path, keys.a_read_only, **ids)
            assert got.status_code == 200, (path, got.text)


@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if r not in PUBLIC])
async def test_no_key_or_a_bad_key_is_401(
    http: httpx.AsyncClient, keys: Keys, pool: Pool, db: ScratchTarget, method: str, path: str
) -> None:
    session_id, turn_id = await _a_session_with_a_turn(http, keys)
    before = await row_counts(pool)
    url = fill(path, session_id, turn_id)
    body = BODIES.get((method, path))
    for headers in (
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        bearer("not-a-key"),
        bearer(keys.revoked),
        bearer(keys.a[:-2] + "xx"),
    ):
        refused = await http.request(method, url, json=body, headers=headers)
        assert refused.status_code == 401, (headers, refused.text)
        assert refused.headers["www-authenticate"] == "Bearer"
        assert keys.a not in refused.text
    assert await row_counts(pool) == before
