"""A session's page says what it waits on (a timer until when, a signal's name, a
join of which children) and sends a signal: by /v1's rules, with the dashboard's
CSRF token and a writing key, a refusal saying why and writing nothing, and the
waiting turn resuming with the payload. Real API and worker processes, over HTTP."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any
from uuid import UUID

import httpx

from stint.store.pool import Pool
from tests.api.conftest import ApiServer, bearer, row_counts
from tests.dashboard.conftest import Tokens, sign_in
from tests.polling import wait_until
from tests.workers import Cluster, event_kinds, fetch


@asynccontextmanager
async def _signed_in(server: ApiServer, token: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        answer = await sign_in(client, token)
        assert answer.status_code == 303, answer.text
        yield client


def _when(moment: datetime) -> str:
    """A time as the dashboard writes it."""
    return moment.isoformat(sep=" ", timespec="seconds")


def _form_field(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]+)"', html)
    assert found, f"no {name} on the page"
    return found[1]


def _note(response: httpx.Response) -> str:
    assert response.status_code == 303, response.text[:300]
    return httpx.URL(response.headers["location"]).params["note"]


async def _enqueue(server: ApiServer, token: str, turn_input: dict[str, Any]) -> tuple[str, str]:
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=bearer(token), timeout=30
    ) as api:
        session_id = (await api.post("/v1/sessions", json={})).json()["id"]
        queued = await api.post(f"/v1/sessions/{session_id}/turns", json={"input": turn_input})
        assert queued.status_code == 201, queued.text
        return session_id, queued.json()["turn_id"]


async def _set_aside(pool: Pool, session_id: str) -> bool:
    """The session's turn waits, its slot free (as tests/acceptance/test_signals.py)."""
    rows = await fetch(pool, "SELECT status, lease_owner FROM sessions WHERE id = %s", session_id)
    return "wait.started" in await event_kinds(pool, UUID(session_id)) and rows[0] == (
        "ready",
        None,
    )


async def _deadline(pool: Pool, turn_id: str) -> datetime:
    rows = await fetch(pool, "SELECT deadline FROM waits WHERE turn_id = %s", turn_id)
    deadline = rows[0][0]
    assert isinstance(deadline, datetime)
    return deadline


async def _turn(pool: Pool, turn_id: str) -> tuple[str, Any]:
    rows = await fetch(pool, "SELECT status, output FROM turns WHERE id = %s", turn_id)
    return rows[0][0], rows[0][1]


async def test_a_signal_sent_from_the_page_is_judged_as_v1_judges_one_and_resumes_the_turn(
    dashboard_api: ApiServer, tokens: Tokens, cluster: Cluster, pool: Pool
) -> None:
    cluster.start_worker(slots=1)
    session_id, turn_id = await _enqueue(
        dashboard_api, tokens.acme, {"min_wait_ms": 0, "wait_for": "go", "timeout_s": 3600}
    )
    await wait_until(lambda: _set_aside(pool, session_id), what="the turn waits for go")
    page = f"/dashboard/sessions/{session_id}"
    url = f"{page}/signal"
    async with (
        _signed_in(dashboard_api, tokens.acme) as writer,
        _signed_in(dashboard_api, tokens.acme_read_only) as reader,
    ):
        html = (await writer.get(page)).text
        deadline = await _deadline(pool, turn_id)
        assert 'the signal <strong class="signal-name">go</strong>' in html
        assert f"until {_when(deadline)} at most" in html
        csrf, key = _form_field(html, "csrf"), _form_field(html, "idempotency_key")
        before = await row_counts(pool)
        # No CSRF token, a stale one, a read-only key: 403 (and no form for the reader).
        for form in ({"name": "go"}, {"name": "go", "csrf": "0" * 64}):
            assert (await writer.post(url, data=form)).status_code == 403
        reading = (await reader.get(page)).text
        assert 'id="signal-form"' not in reading and 'id="signal-form"' in html
        refused = await reader.post(url, data={"csrf": _form_field(reading, "csrf"), "name": "go"})
        assert refused.status_code == 403
        # Bad input: the note says why, in the words of the shared input rules.
        for form, said in (
            ({"name": "a b"}, "the signal's name must be 1..100 characters"),
            ({"name": ""}, "the signal's name must be 1..100 characters"),
            ({"name": "x" * 101}, "the signal's name must be 1..100 characters"),
            ({"name": "go", "payload": "{oops"}, "the payload is not valid JSON"),
            ({"name": "go", "payload": '{"a": NaN}'}, "NaN"),
            ({"name": "go", "payload": "[" * 100 + "]" * 100}, "deeper than the limit"),
            ({"name": "go", "payload": '"' + "x" * 300_000 + '"'}, "larger than the limit"),
            ({"name": "go", "idempotency_key": "k\x07"}, "idempotency key must be"),
            ({"name": "go", "idempotency_key": ""}, "idempotency key must be"),
        ):
            note = _note(
                await writer.post(url, data={"csrf": csrf, "idempotency_key": key, **form})
            )
            assert note.startswith("signal not sent: ") and said in note, (form, note)
        assert await row_counts(pool) == before
        assert await _turn(pool, turn_id) == ("queued", None)  # still waiting
        # The signal: sent, and the waiting turn resumes with its payload.
        form = {"csrf": csrf, "idempotency_key": key, "name": "go", "payload": '{"n": 1}'}
        assert _note(await writer.post(url, data=form)) == (
            "signal go sent: kept until a wait on go takes it"
        )

        async def resumed() -> Any:
            status, output = await _turn(pool, turn_id)
            return output if status == "succeeded" else None

        output = await wait_until(resumed, what="the waiting turn resumed")
        (signal_id,) = (
            await fetch(pool, "SELECT id FROM signals WHERE session_id = %s", session_id)
        )[0]
        assert output["signal"] == {"id": str(signal_id), "payload": {"n": 1}}
        # The form sent again (a reload, a double click): the same signal, nothing new.
        assert "was sent already" in _note(await writer.post(url, data=form))
        conflict = _note(await writer.post(url, data={**form, "payload": '{"n": 2}'}))
        assert conflict.startswith("signal not sent: ") and "idempotency key" in conflict
        assert len(await fetch(pool, "SELECT 1 FROM signals")) == 1
        (received,) = await fetch(
            pool,
            "SELECT payload FROM events WHERE session_id = %s AND kind = 'signal.received'",
            session_id,
        )
        assert received[0]["actor"]["door"] == "dashboard"
    assert "Traceback" not in dashboard_api.log_text()


async def test_the_page_says_what_each_session_waits_on_and_which_signals_it_keeps(
    dashboard_api: ApiServer, tokens: Tokens, cluster: Cluster, pool: Pool
) -> None:
    cluster.start_worker(slots=2)
    sleeper, sleeping = await _enqueue(
        dashboard_api, tokens.acme, {"min_wait_ms": 0, "sleep_s": 3600}
    )
    parent, joining = await _enqueue(
        dashboard_api,
        tokens.acme,
        {"min_wait_ms": 0, "spawn": {"count": 2, "input": {"min_wait_ms": 0, "wait_for": "x"}}},
    )
    await wait_until(lambda: _set_aside(pool, sleeper), what="the sleeper sleeps")
    await wait_until(lambda: _set_aside(pool, parent), what="the parent joins")

    async def children() -> list[str] | None:
        rows = await fetch(
            pool,
            "SELECT child_id FROM children WHERE parent_id = %s ORDER BY created_at, child_id",
            parent,
        )
        kids = [str(r[0]) for r in rows]
        waiting = [await _set_aside(pool, k) for k in kids]
        return kids if len(kids) == 2 and all(waiting) else None

    kids = await wait_until(children, what="both children wait for x")
    async with httpx.AsyncClient(
        base_url=dashboard_api.base_url, headers=bearer(tokens.acme), timeout=30
    ) as api:
        kept = await api.post(f"/v1/sessions/{sleeper}/signals/later", json={"payload": [1, 2]})
        assert kept.status_code == 201, kept.text
    async with _signed_in(dashboard_api, tokens.acme) as browser:
        html = (await browser.get(f"/dashboard/sessions/{sleeper}")).text
        deadline = await _deadline(pool, sleeping)
        assert f"a timer, until {_when(deadline)}" in html
        assert re.search(r"<td>later</td><td>[^<]+</td><td><code>\[1, 2\]</code>", html)
        html = (await browser.get(f"/dashboard/sessions/{parent}")).text
        assert "all of 2 children (0 ended)" in html
        for kid in kids:
            assert f'<a href="/dashboard/sessions/{kid}"><code>{kid[:8]}</code></a>' in html
        assert "Nothing." not in html.split('id="waits"')[1].split("</section>")[0]
        html = (await browser.get(f"/dashboard/sessions/{kids[0]}")).text
        assert 'the signal <strong class="signal-name">x</strong>' in html
        assert f'id="parent-link"><code>{parent}</code>' in html
        # The session that waits on nothing says so.
        idle, _ = await _enqueue(dashboard_api, tokens.acme, {"min_wait_ms": 0})
        html = (await browser.get(f"/dashboard/sessions/{idle}")).text
        assert "Nothing." in html.split('id="waits"')[1].split("</section>")[0]
    assert (await _turn(pool, joining))[0] == "queued"
