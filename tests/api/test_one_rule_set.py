"""Acceptance: one set of input rules at every door (issue 22, finding 8).

The CLI and the API (and, for a signal, the dashboard's form) judge tenants,
pins, idempotency keys, numbers and idempotent retries by the same rules
(``stint.store.input_rules``); each refusal writes nothing. Real ``stint`` and
``stint api`` processes."""

from __future__ import annotations

import asyncio
import json
import re

import httpx

from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from stint.store.vocabulary import AdmissionLimit
from tests.api.conftest import ApiServer, Keys, bearer, row_counts
from tests.dashboard.conftest import sign_in
from tests.workers import Cluster, set_limits


async def _cli(cluster: Cluster, *args: str) -> tuple[int, str, str]:
    done = await asyncio.to_thread(cluster.stint, *args)
    return done.returncode, done.stdout, done.stderr


async def test_the_cli_refuses_what_no_key_or_header_could_name(
    cluster: Cluster, pool: Pool
) -> None:
    before = await row_counts(pool)
    cases = [
        (["--tenant", "ácme"], "tenant must be"),
        (["--tenant", "a b"], "tenant must be"),
        (["--pin", "v\x012"], "pin must be"),
        (["--pin", "v 2"], "pin must be"),
        (["--idempotency-key", "k\x07"], "idempotency-key must be"),
        (["--idempotency-key", "k" * 201], "idempotency-key must be"),
    ]
    for flags, said in cases:
        code, out, err = await _cli(cluster, "enqueue", *flags, "{}")
        assert (code, out) == (2, ""), (flags, err)
        assert said in err and len(err.strip().splitlines()) == 1, (flags, err)
    for text in ('{"x": 1e-400}', '{"x": [-2.5E-999]}'):
        code, _, err = await _cli(cluster, "enqueue", text)
        assert code == 2 and "too small to be told from 0" in err, (text, err)
    assert await row_counts(pool) == before


async def test_another_tenants_session_is_unknown_from_the_cli(
    cluster: Cluster, pool: Pool
) -> None:
    code, out, err = await _cli(cluster, "enqueue", "--tenant", "acme", "{}")
    assert code == 0, err
    acme_session = json.loads(out)["session_id"]
    before = await row_counts(pool)
    code, out, err = await _cli(
        cluster, "enqueue", "--tenant", "beta", "--session", acme_session, "{}"
    )
    assert (code, out) == (2, ""), err
    assert "unknown session" in err.lower() or "no session" in err.lower(), err
    assert await row_counts(pool) == before
    code, _, err = await _cli(
        cluster, "enqueue", "--tenant", "acme", "--session", acme_session, "{}"
    )
    assert code == 0, err


async def test_an_idempotent_retry_that_differs_in_anything_is_refused(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool, cluster: Cluster
) -> None:
    session_id = (await http.post("/v1/sessions", json={}, headers=bearer(keys.a))).json()["id"]
    url = f"/v1/sessions/{session_id}/turns"
    headers = {**bearer(keys.a), "Idempotency-Key": "same"}
    first = await http.post(url, json={"input": {"n": 1}, "timeout_seconds": 30}, headers=headers)
    assert first.status_code == 201, first.text
    again = await http.post(url, json={"input": {"n": 1}, "timeout_seconds": 30}, headers=headers)
    assert again.status_code == 200 and again.json()["turn_id"] == first.json()["turn_id"]
    before = await row_counts(pool)
    for body in (
        {"input": {"n": 1}, "timeout_seconds": 60},
        {"input": {"n": 1}},
        {"input": {"n": 1}, "timeout_seconds": 30, "busy": "interrupt"},
        {"input": {"n": 1}, "timeout_seconds": 30, "busy": "reject"},
    ):
        differs = await http.post(url, json=body, headers=headers)
        assert differs.status_code == 409, (body, differs.text)
        assert "idempotency key" in differs.json()["detail"]
    assert await row_counts(pool) == before
    # The CLI, the same rule: exit 2.
    args = ["enqueue", "--session", session_id, "--idempotency-key", "cli-key"]
    code, _, err = await _cli(cluster, *args, "--timeout", "5", "{}")
    assert code == 0, err
    before = await row_counts(pool)
    code, _, err = await _cli(cluster, *args, "--timeout", "6", "{}")
    assert code == 2 and "idempotency key" in err, err
    code, _, err = await _cli(cluster, *args, "--timeout", "5", "--busy", "reject", "{}")
    assert code == 2 and "idempotency key" in err, err
    assert await row_counts(pool) == before


async def test_a_number_too_small_to_store_is_refused_by_the_api(
    http: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    """Before: 1e-400 was stored as 0.0."""
    session_id = (await http.post("/v1/sessions", json={}, headers=bearer(keys.a))).json()["id"]
    before = await row_counts(pool)
    refused = await http.post(
        f"/v1/sessions/{session_id}/turns",
        content=b'{"input": {"x": 1e-400}}',
        headers={**bearer(keys.a), "Content-Type": "application/json"},
    )
    assert refused.status_code == 400, refused.text
    assert "too small to be told from 0" in refused.json()["detail"]
    assert await row_counts(pool) == before
    kept = await http.post(
        f"/v1/sessions/{session_id}/turns",
        content=b'{"input": {"x": 1e-300, "z": 0.0, "e": 0e5}}',
        headers={**bearer(keys.a), "Content-Type": "application/json"},
    )
    assert kept.status_code == 201, kept.text


async def test_sessions_past_the_tenants_limit_are_refused_by_the_api_and_write_nothing(
    db: ScratchTarget, http: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    """Before: 2,000 sessions in 6 s with one key, and no limit could stop them."""
    await set_limits(pool, db.config, {AdmissionLimit.MAX_SESSIONS: 2}, tenant="a")
    for _ in range(2):
        made = await http.post("/v1/sessions", json={}, headers=bearer(keys.a))
        assert made.status_code == 201, made.text
    before = await row_counts(pool)
    refused = await http.post("/v1/sessions", json={"pin": "v2"}, headers=bearer(keys.a))
    assert refused.status_code == 429, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["detail"] == (
        "admission refused: max_sessions limit of 2 sessions reached for tenant a; "
        "nothing was written"
    )
    assert await row_counts(pool) == before
    other = await http.post("/v1/sessions", json={}, headers=bearer(keys.b))
    assert other.status_code == 201, other.text


async def test_sessions_past_the_tenants_limit_are_refused_by_the_cli_and_write_nothing(
    cluster: Cluster, pool: Pool
) -> None:
    """``stint admission set --max-sessions`` and ``stint enqueue`` without a session:
    exit 3 with the same one line as the API's 429, nothing written."""
    code, _, err = await _cli(
        cluster, "admission", "set", "--tenant", "acme", "--max-sessions", "1"
    )
    assert code == 0, err
    code, _, err = await _cli(cluster, "enqueue", "--tenant", "acme", "{}")
    assert code == 0, err
    before = await row_counts(pool)
    code, out, err = await _cli(cluster, "enqueue", "--tenant", "acme", "{}")
    assert (code, out) == (3, ""), err
    assert err.strip() == (
        "stint enqueue: admission refused: max_sessions limit of 1 sessions reached for "
        "tenant acme; nothing was written"
    )
    assert await row_counts(pool) == before
    code, out, err = await _cli(cluster, "admission", "show")
    assert code == 0, err
    [acme] = [row for row in json.loads(out)["tenants"] if row["tenant"] == "acme"]
    assert (acme["limits"]["max_sessions"], acme["usage"]["sessions"]) == (1, 1)


def _note(response: httpx.Response) -> str:
    """What the dashboard said of a form it took or refused (a redirect's note)."""
    assert response.status_code == 303, response.text[:300]
    return httpx.URL(response.headers["location"]).params["note"]


async def test_a_signal_is_judged_by_the_same_rules_at_every_door(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool, cluster: Cluster
) -> None:
    session_id = (await http.post("/v1/sessions", json={}, headers=bearer(keys.a))).json()["id"]
    other = (await http.post("/v1/sessions", json={}, headers=bearer(keys.b))).json()["id"]
    async with httpx.AsyncClient(base_url=api.base_url, timeout=30) as dashboard:
        assert (await sign_in(dashboard, keys.a)).status_code == 303
        page = (await dashboard.get(f"/dashboard/sessions/{session_id}")).text
        found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
        assert found, "no CSRF token on the page"
        csrf, form_url = found[1], f"/dashboard/sessions/{session_id}/signal"
        before = await row_counts(pool)
        for name in ("a b", "x" * 101, "é"):
            code, out, err = await _cli(cluster, "signal", session_id, name, "{}")
            assert (code, out) == (2, ""), (name, err)
            assert "NAME must be 1..100 characters" in err, err
            refused = await http.post(
                f"/v1/sessions/{session_id}/signals/{name}", json={}, headers=bearer(keys.a)
            )
            assert refused.status_code == 422, (name, refused.text)
            note = _note(await dashboard.post(form_url, data={"csrf": csrf, "name": name}))
            assert note.startswith("signal not sent: the signal's name must be 1..100"), note
        deep = '{"a": ' * 200 + "1" + "}" * 200
        code, _, err = await _cli(cluster, "signal", session_id, "go", deep)
        assert code == 2, err
        refused = await http.post(
            f"/v1/sessions/{session_id}/signals/go",
            content=f'{{"payload": {deep}}}'.encode(),
            headers={**bearer(keys.a), "Content-Type": "application/json"},
        )
        assert refused.status_code in (400, 422), refused.text
        note = _note(
            await dashboard.post(form_url, data={"csrf": csrf, "name": "go", "payload": deep})
        )
        assert note.startswith("signal not sent: ") and "deeper than the limit" in note, note
        code, _, err = await _cli(cluster, "signal", session_id, "go", "--idempotency-key", "k\x07")
        assert code == 2 and "idempotency-key must be" in err, err
        form = {"csrf": csrf, "name": "go", "idempotency_key": "k\x07"}
        note = _note(await dashboard.post(form_url, data=form))
        assert note.startswith("signal not sent: idempotency key must be"), note
        # Another tenant's session is unknown to the key, as everywhere.
        unknown = await http.post(
            f"/v1/sessions/{other}/signals/go", json={}, headers=bearer(keys.a)
        )
        assert unknown.status_code == 404, unknown.text
        note = _note(
            await dashboard.post(
                f"/dashboard/sessions/{other}/signal", data={**form, "idempotency_key": "k2"}
            )
        )
        assert note.startswith("signal not sent: ") and "session" in note.lower(), note
        assert await row_counts(pool) == before
        sent = await http.post(
            f"/v1/sessions/{session_id}/signals/go",
            json={"payload": 1},
            headers={**bearer(keys.a), "Idempotency-Key": "k1"},
        )
        assert sent.status_code == 201, sent.text
        code, out, err = await _cli(
            cluster, "signal", session_id, "go", "2", "--idempotency-key", "k1"
        )
        assert code == 2 and "idempotency key" in err, err
        retry = {"csrf": csrf, "name": "go", "idempotency_key": "k1"}
        note = _note(await dashboard.post(form_url, data={**retry, "payload": "2"}))
        assert note.startswith("signal not sent: ") and "idempotency key" in note, note
        assert await row_counts(pool) == {**before, "signals": 1, "events": before["events"] + 1}
        note = _note(await dashboard.post(form_url, data={**retry, "payload": "1"}))
        assert note == "signal go was sent already (the same idempotency key)", note
        code, out, err = await _cli(
            cluster, "signal", session_id, "go", "1", "--idempotency-key", "k1"
        )
        assert code == 0 and json.loads(out)["signal_id"] == sent.json()["signal_id"], err
