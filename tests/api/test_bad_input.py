"""Bad input gets one clear problem+json line and a 4xx, and nothing is written;
the store's capacity refusals are 429 with Retry-After."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from stint.store.vocabulary import AdmissionLimit
from tests.api.conftest import QUEUE_LIMIT, Keys, bearer, row_counts
from tests.workers import set_limits


async def _session(http: httpx.AsyncClient, keys: Keys) -> str:
    created = await http.post("/v1/sessions", json={}, headers=bearer(keys.a))
    assert created.status_code == 201
    session_id: str = created.json()["id"]
    return session_id


def _one_line_problem(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == status and problem["title"]
    detail: str = problem["detail"]
    assert detail and "\n" not in detail and "Traceback" not in detail
    return detail


DEEP = "[" * 5000 + "]" * 5000
JSON = "application/json"
BAD_BODIES: list[tuple[str, bytes, str, int, str]] = [
    ("not JSON", b'{"input": {', JSON, 400, "not valid JSON"),
    ("not UTF-8", b'{"input": {"a": "\xff"}}', JSON, 400, "UTF-8"),
    ("too deep", f'{{"input": {{"a": {DEEP}}}}}'.encode(), JSON, 400, "levels deep"),
    ("NaN", b'{"input": {"a": NaN}}', JSON, 400, "NaN"),
    ("Infinity", b'{"input": {"a": -Infinity}}', JSON, 400, "Infinity"),
    ("huge float", b'{"input": {"a": 1e999}}', JSON, 400, "out of range"),
    ("huge integer", b'{"input": {"a": ' + b"9" * 5000 + b"}}", JSON, 400, "JSON"),
    ("NUL", b'{"input": {"a": "x\\u0000y"}}', JSON, 400, "u0000"),
    ("NUL in a key", b'{"input": {"\\u0000": 1}}', JSON, 400, "u0000"),
    ("lone surrogate", b'{"input": {"a": "\\ud800"}}', JSON, 400, "surrogate"),
    ("not JSON content", b"input=1", "application/x-www-form-urlencoded", 415, "JSON"),
    ("unknown field", b'{"input": {}, "inptu": {}}', JSON, 422, "inptu"),
    ("wrong type", b'{"input": []}', JSON, 422, "input"),
    ("string number", b'{"input": {}, "timeout_seconds": "5"}', JSON, 422, "timeout"),
    ("negative timeout", b'{"input": {}, "timeout_seconds": -5}', JSON, 422, "timeout"),
    ("huge timeout", b'{"input": {}, "timeout_seconds": 1e300}', JSON, 422, "timeout"),
    ("bad busy", b'{"input": {}, "busy": "maybe"}', JSON, 422, "busy"),
    ("no input", b"{}", JSON, 422, "input"),
    ("an array", b"[]", JSON, 422, "body"),
]


@pytest.mark.parametrize(
    ("raw", "content_type", "status", "says"),
    [case[1:] for case in BAD_BODIES],
    ids=[case[0] for case in BAD_BODIES],
)
async def test_bad_turn_bodies_are_refused_and_nothing_is_written(
    http: httpx.AsyncClient,
    keys: Keys,
    pool: Pool,
    raw: bytes,
    content_type: str,
    status: int,
    says: str,
) -> None:
    session_id = await _session(http, keys)
    before = await row_counts(pool)
    refused = await http.post(
        f"/v1/sessions/{session_id}/turns",
        content=raw,
        headers={**bearer(keys.a), "Content-Type": content_type},
    )
    assert says in _one_line_problem(refused, status)
    assert await row_counts(pool) == before


async def test_a_body_over_the_limit_is_413_by_length_or_by_counting(
    http: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    session_id = await _session(http, keys)
    before = await row_counts(pool)
    big = json.dumps({"input": {"a": "x" * 2_000_000}}).encode()
    declared = await http.post(
        f"/v1/sessions/{session_id}/turns",
        content=big,
        headers={**bearer(keys.a), "Content-Type": "application/json"},
    )
    assert "at most" in _one_line_problem(declared, 413)

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    streamed = await http.post(
        f"/v1/sessions/{session_id}/turns",
        content=chunks(),
        headers={**bearer(keys.a), "Content-Type": "application/json"},
    )
    assert "limit" in _one_line_problem(streamed, 413)
    assert await row_counts(pool) == before


async def test_an_input_over_max_input_bytes_is_413(
    http: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    session_id = await _session(http, keys)
    before = await row_counts(pool)
    refused = await http.post(
        f"/v1/sessions/{session_id}/turns",
        json={"input": {"a": "x" * 300_000}},
        headers=bearer(keys.a),
    )
    assert "larger than the limit 262144" in _one_line_problem(refused, 413)
    assert await row_counts(pool) == before


async def test_bad_parameters_are_refused(http: httpx.AsyncClient, keys: Keys) -> None:
    session_id = await _session(http, keys)
    auth = bearer(keys.a)
    cases = [
        ("/v1/sessions/not-a-uuid", {}, 422, "session_id"),
        (f"/v1/sessions/{session_id}/events?after=-1", {}, 422, "after"),
        (f"/v1/sessions/{session_id}/events?after={2**63}", {}, 422, "after"),
        (f"/v1/sessions/{session_id}/events?format=xml", {}, 422, "format"),
        (f"/v1/sessions/{session_id}/events", {"Last-Event-ID": "seven"}, 422, "Last-Event-ID"),
        (f"/v1/sessions/{session_id}/turns?after_seq={2**64}", {}, 422, "after_seq"),
        ("/v1/sessions?cursor=bm90IGEgY3Vyc29y", {}, 400, "cursor"),
        ("/v1/sessions?limit=0", {}, 422, "limit"),
        ("/v1/sessions?status=sleeping", {}, 422, "status"),
        (f"/v1/sessions/{session_id}/events?aftr=5", {}, 422, "unknown query parameter 'aftr'"),
        ("/v1/sessions?pin=a%00b", {}, 422, "NUL"),
    ]
    for url, headers, status, says in cases:
        refused = await http.get(url, headers={**auth, **headers})
        assert says in _one_line_problem(refused, status), url


async def test_unknown_routes_and_methods_are_problems(http: httpx.AsyncClient) -> None:
    _one_line_problem(await http.get("/v1/nothing-here"), 404)
    _one_line_problem(await http.delete("/v1/sessions"), 405)


async def test_a_reused_idempotency_key_with_another_input_is_409(
    http: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    session_id = await _session(http, keys)
    url = f"/v1/sessions/{session_id}/turns"
    headers = {**bearer(keys.a), "Idempotency-Key": "retry-1"}
    first = await http.post(url, json={"input": {"n": 1}}, headers=headers)
    again = await http.post(url, json={"input": {"n": 1}}, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["turn_id"] == again.json()["turn_id"] and again.json()["created"] is False
    before = await row_counts(pool)
    other = await http.post(url, json={"input": {"n": 2}}, headers=headers)
    assert "idempotency key" in _one_line_problem(other, 409)
    assert await row_counts(pool) == before


async def test_capacity_refusals_are_429_with_retry_after_and_write_nothing(
    http: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    session_id = await _session(http, keys)
    url = f"/v1/sessions/{session_id}/turns"
    busy = await http.post(url, json={"input": {}}, headers=bearer(keys.a))
    assert busy.status_code == 201
    before = await row_counts(pool)
    rejected = await http.post(url, json={"input": {}, "busy": "reject"}, headers=bearer(keys.a))
    assert "busy" in _one_line_problem(rejected, 429)
    assert rejected.headers["retry-after"] == "1"
    assert await row_counts(pool) == before
    for _ in range(QUEUE_LIMIT - 1):
        queued = await http.post(url, json={"input": {}}, headers=bearer(keys.a))
        assert queued.status_code == 201
    before = await row_counts(pool)
    full = await http.post(url, json={"input": {}}, headers=bearer(keys.a))
    assert "queue full" in _one_line_problem(full, 429)
    assert full.headers["retry-after"] == "1"
    assert await row_counts(pool) == before


async def test_an_answer_with_no_open_question_is_409(
    http: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    session_id = await _session(http, keys)
    before = await row_counts(pool)
    refused = await http.post(
        f"/v1/sessions/{session_id}/answers",
        json={"step_key": "ask-nothing", "answer": True},
        headers=bearer(keys.a),
    )
    assert "no parked turn" in _one_line_problem(refused, 409)
    assert await row_counts(pool) == before


async def test_an_admission_limit_is_429_with_retry_after_and_writes_nothing(
    db: ScratchTarget, http: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    await set_limits(pool, db.config, {AdmissionLimit.MAX_QUEUED: 1}, tenant="a")
    first = await _session(http, keys)
    url = f"/v1/sessions/{first}/turns"
    retry = {**bearer(keys.a), "Idempotency-Key": "order-1"}
    admitted = await http.post(url, json={"input": {}}, headers=retry)
    assert admitted.status_code == 201
    second = await _session(http, keys)
    before = await row_counts(pool)
    refused = await http.post(
        f"/v1/sessions/{second}/turns", json={"input": {}}, headers=bearer(keys.a)
    )
    detail = _one_line_problem(refused, 429)
    assert detail == (
        "admission refused: max_queued limit of 1 unfinished turns reached for tenant a; "
        "nothing was written"
    )
    assert refused.headers["retry-after"] == "1"
    assert await row_counts(pool) == before
    # The producer's retry of the admitted turn answers 200 with the same turn, at the limit.
    again = await http.post(url, json={"input": {}}, headers=retry)
    assert (again.status_code, again.json()["turn_id"]) == (200, admitted.json()["turn_id"])
    # Tenant b is not held by a's limit.
    other = await http.post("/v1/sessions", json={}, headers=bearer(keys.b))
    queued = await http.post(
        f"/v1/sessions/{other.json()['id']}/turns", json={"input": {}}, headers=bearer(keys.b)
    )
    assert queued.status_code == 201
