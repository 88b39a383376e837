"""/v1/schedules and /v1/webhooks through a real ``stint api``: the same input rules and
problem+json refusals as the rest of /v1 (nothing written), tenant scoping, the
signing secret in the creation's answer only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from stint.store.pool import Pool
from tests.api.conftest import ApiServer, Keys, bearer
from tests.workers import count_rows

TABLES = ("schedules", "schedule_ticks", "webhook_endpoints", "webhook_deliveries", "sessions")


@pytest_asyncio.fixture(loop_scope="session")
async def client(keyed_api: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=keyed_api.base_url, timeout=30) as http:
        yield http


async def _counts(pool: Pool) -> dict[str, int]:
    return {table: await count_rows(pool, table) for table in TABLES}


def _problem(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    detail: str = response.json()["detail"]
    assert detail and "\n" not in detail
    return detail


SCHEDULE = {"name": "nightly", "input": {"n": 1}, "every_seconds": 60}
BAD_SCHEDULES: list[tuple[str, dict[str, object], int, str]] = [
    ("bad cron", {"cron": "61 * * * *", "every_seconds": None}, 422, "bad cron expression"),
    ("cron and interval", {"cron": "* * * * *"}, 422, "either a cron expression or an interval"),
    ("neither", {"every_seconds": None}, 422, "either a cron expression or an interval"),
    ("bad zone", {"timezone": "Mars/Olympus"}, 422, "unknown timezone"),
    ("zone path", {"timezone": "../../etc/passwd"}, 422, "unknown timezone"),
    ("short interval", {"every_seconds": 0.5}, 422, "every_seconds"),
    ("string interval", {"every_seconds": "60"}, 422, "every_seconds"),
    ("bad name", {"name": "no spaces"}, 422, "name"),
    ("catch-up", {"catch_up": 1001}, 422, "catch_up"),
    ("bad busy", {"busy": "maybe"}, 422, "busy"),
    ("unknown field", {"evrey": 5}, 422, "evrey"),
    ("input array", {"input": []}, 422, "input"),
    ("pin and session", {"pin": "p", "session_id": "00000000-0000-0000-0000-000000000001"},
     422, "a pin is for the new session"),
    ("unknown session", {"session_id": "00000000-0000-0000-0000-000000000001"}, 404, "session"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "change", "status", "says"), BAD_SCHEDULES)
async def test_bad_schedules_are_refused_and_nothing_is_written(
    client: httpx.AsyncClient,
    keys: Keys,
    pool: Pool,
    what: str,
    change: dict[str, object],
    status: int,
    says: str,
) -> None:
    before = await _counts(pool)
    body = {k: v for k, v in {**SCHEDULE, **change}.items() if v is not None}
    refused = await client.post("/v1/schedules", json=body, headers=bearer(keys.a))
    assert says in _problem(refused, status)
    assert await _counts(pool) == before


async def test_a_schedule_through_its_life(
    client: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    made = await client.post("/v1/schedules", json=SCHEDULE, headers=bearer(keys.a))
    assert made.status_code == 201, made.text
    shown = made.json()
    assert shown["next_run_at"] and not shown["paused"] and shown["every_seconds"] == 60
    again = await client.post("/v1/schedules", json=SCHEDULE, headers=bearer(keys.a))
    assert "already exists" in _problem(again, 409)
    sid = shown["id"]
    assert _problem(await client.get(f"/v1/schedules/{sid}", headers=bearer(keys.b)), 404)
    listed = await client.get("/v1/schedules", headers=bearer(keys.b))
    assert listed.json() == {"schedules": []}
    read_only = await client.post(f"/v1/schedules/{sid}/pause", headers=bearer(keys.a_read_only))
    _problem(read_only, 403)
    paused = await client.post(f"/v1/schedules/{sid}/pause", headers=bearer(keys.a))
    assert paused.json()["paused"] and paused.json()["next_run_at"] is None
    resumed = await client.post(f"/v1/schedules/{sid}/resume", headers=bearer(keys.a))
    assert not resumed.json()["paused"] and resumed.json()["next_run_at"]
    one = await client.get(f"/v1/schedules/{sid}", headers=bearer(keys.a))
    assert one.json()["recent_ticks"] == []
    gone = await client.delete(f"/v1/schedules/{sid}", headers=bearer(keys.a))
    assert gone.status_code == 200
    assert _problem(await client.delete(f"/v1/schedules/{sid}", headers=bearer(keys.a)), 404)
    assert await count_rows(pool, "schedules") == 0


async def test_a_schedule_on_a_session_of_another_tenant_is_not_found(
    client: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    theirs = (await client.post("/v1/sessions", json={}, headers=bearer(keys.b))).json()["id"]
    body = {**SCHEDULE, "session_id": theirs}
    refused = await client.post("/v1/schedules", json=body, headers=bearer(keys.a))
    _problem(refused, 404)
    mine = await client.post("/v1/schedules", json=body, headers=bearer(keys.b))
    assert mine.status_code == 201 and mine.json()["session_id"] == theirs


WEBHOOK = {"url": "https://hooks.example.com/stint", "events": ["turn.completed"]}
BAD_WEBHOOKS: list[tuple[str, dict[str, object], str]] = [
    ("scheme", {"url": "file:///etc/passwd"}, "http:// or https://"),
    ("credentials", {"url": "https://u:p@example.com/x"}, "credentials"),
    ("bad port", {"url": "https://example.com:70000/x"}, "host or port"),
    ("unknown kind", {"events": ["turn.finished"]}, "unknown event kind"),
    ("no kinds", {"events": []}, "events"),
    ("kinds not strings", {"events": [1]}, "events"),
    ("unknown field", {"secret": "mine"}, "secret"),
    ("long description", {"description": "x" * 201}, "description"),
]


@pytest.mark.parametrize(("what", "change", "says"), BAD_WEBHOOKS)
async def test_bad_webhooks_are_refused_and_nothing_is_written(
    client: httpx.AsyncClient,
    keys: Keys,
    pool: Pool,
    what: str,
    change: dict[str, object],
    says: str,
) -> None:
    before = await _counts(pool)
    refused = await client.post("/v1/webhooks", json={**WEBHOOK, **change}, headers=bearer(keys.a))
    assert says in _problem(refused, 422)
    assert await _counts(pool) == before


async def test_a_webhook_shows_its_secret_once_and_only_to_its_tenant(
    client: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    made = await client.post("/v1/webhooks", json=WEBHOOK, headers=bearer(keys.a))
    assert made.status_code == 201, made.text
    secret = made.json()["secret"]
    assert secret.startswith("whsec_")
    wid = made.json()["id"]
    shown = await client.get(f"/v1/webhooks/{wid}", headers=bearer(keys.a))
    listed = await client.get("/v1/webhooks", headers=bearer(keys.a))
    for answer in (shown, listed):
        assert answer.status_code == 200 and secret not in answer.text
    assert _problem(await client.get(f"/v1/webhooks/{wid}", headers=bearer(keys.b)), 404)
    assert (await client.get("/v1/webhooks", headers=bearer(keys.b))).json() == {"webhooks": []}
    log = await client.get(f"/v1/webhooks/{wid}/deliveries", headers=bearer(keys.a))
    assert log.json() == {"deliveries": []}
    wrong = await client.get(f"/v1/webhooks/{wid}/deliveries?status=lost", headers=bearer(keys.a))
    _problem(wrong, 422)
    enabled = await client.post(f"/v1/webhooks/{wid}/enable", headers=bearer(keys.a))
    assert enabled.json()["enabled"]
    assert (await client.delete(f"/v1/webhooks/{wid}", headers=bearer(keys.a))).status_code == 200
    assert await count_rows(pool, "webhook_endpoints") == 0


async def test_without_a_webhook_key_no_endpoint_is_made(
    http: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    refused = await http.post("/v1/webhooks", json=WEBHOOK, headers=bearer(keys.a))
    assert "STINT_WEBHOOK_KEY" in _problem(refused, 503)
    assert await count_rows(pool, "webhook_endpoints") == 0
