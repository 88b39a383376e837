"""Who did what (issue 22, finding 8): every cancel, interrupt and answer records
its actor (the door, and the key or the OS user) in its event, and the
dashboard shows it. Before: an operator answering or cancelling another
tenant's turn from the dashboard left no record of who acted. Real worker,
API and CLI processes."""

from __future__ import annotations

import asyncio
import re
from typing import Any
from uuid import UUID

import httpx

from stint.store.keys import parse_token
from stint.store.pool import Pool
from tests.api.conftest import ApiServer, bearer
from tests.dashboard.conftest import Tokens, sign_in
from tests.polling import wait_until
from tests.workers import Cluster, fetch


async def _payloads(pool: Pool, session_id: str, kind: str) -> list[dict[str, Any]]:
    rows = await fetch(
        pool,
        "SELECT payload FROM events WHERE session_id = %s AND kind = %s ORDER BY seq",
        UUID(session_id),
        kind,
    )
    return [row[0] for row in rows]


def _key_id(token: str) -> str:
    parsed = parse_token(token)
    assert parsed is not None
    return parsed[0]


async def test_every_control_and_answer_names_its_actor(
    dashboard_api: ApiServer, tokens: Tokens, cluster: Cluster, pool: Pool
) -> None:
    cluster.start_worker(slots=2)
    async with httpx.AsyncClient(
        base_url=dashboard_api.base_url, headers=bearer(tokens.acme), timeout=30
    ) as api:

        async def parked_turn(question: str) -> tuple[str, str]:
            sid = (await api.post("/v1/sessions", json={})).json()["id"]
            await api.post(
                f"/v1/sessions/{sid}/turns", json={"input": {"min_wait_ms": 0, "ask": question}}
            )

            async def asked() -> str | None:
                found = await _payloads(pool, sid, "approval.requested")
                return str(found[0]["step_key"]) if found else None

            return sid, await wait_until(asked, what="the turn parked")

        # The API: a tenant's key cancels its parked turn (ended in the database).
        by_api, _ = await parked_turn("api?")
        cancelled = await api.post(f"/v1/sessions/{by_api}/cancel", json={"reason": "mine"})
        assert cancelled.status_code == 200, cancelled.text
        (ended,) = await _payloads(pool, by_api, "turn.cancelled")
        assert ended["actor"] == {
            "door": "api",
            "key_id": _key_id(tokens.acme),
            "tenant": "acme",
            "operator": False,
        }
        # The API: an interrupt of a turn a live worker runs is logged with who asked.
        running = (await api.post("/v1/sessions", json={})).json()["id"]
        await api.post(
            f"/v1/sessions/{running}/turns", json={"input": {"min_wait_ms": 0, "gate": "hold"}}
        )

        async def started() -> bool:
            return bool(await _payloads(pool, running, "tool.returned"))

        await wait_until(started, what="the gated turn running")
        asked = await api.post(f"/v1/sessions/{running}/interrupt", json={})
        assert asked.status_code == 200, asked.text
        (requested,) = await _payloads(pool, running, "control.requested")
        assert requested["action"] == "interrupt"
        assert requested["actor"]["door"] == "api"
        assert requested["actor"]["key_id"] == _key_id(tokens.acme)
        # The CLI answers: the OS user.
        by_cli, step_key = await parked_turn("cli?")
        done = await asyncio.to_thread(cluster.stint, "answer", by_cli, step_key, '"yes"')
        assert done.returncode == 0, done.stderr
        (answered,) = await _payloads(pool, by_cli, "approval.answered")
        assert answered["actor"]["door"] == "cli" and answered["actor"]["user"]
        # The dashboard: an operator cancels acme's turn.
        by_dashboard, _ = await parked_turn("dashboard?")
    async with httpx.AsyncClient(base_url=dashboard_api.base_url, timeout=30) as browser:
        await sign_in(browser, tokens.operator)
        page = await browser.get(f"/dashboard/sessions/{by_dashboard}")
        found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
        assert found
        await browser.post(f"/dashboard/sessions/{by_dashboard}/cancel", data={"csrf": found[1]})
        (ended,) = await _payloads(pool, by_dashboard, "turn.cancelled")
        assert ended["actor"] == {
            "door": "dashboard",
            "key_id": _key_id(tokens.operator),
            "tenant": "ops",
            "operator": True,
        }
        shown = await browser.get(f"/dashboard/sessions/{by_dashboard}")
        assert _key_id(tokens.operator) in shown.text  # the page shows who acted
    cluster.open_gate("hold")


async def test_the_dashboard_interrupts_a_running_turn_and_the_queued_one_goes_on(
    dashboard_api: ApiServer, tokens: Tokens, cluster: Cluster, pool: Pool
) -> None:
    """The session page's Interrupt button does what ``POST /v1/.../interrupt`` does
    (the running turn ends ``interrupted``, the next queued turn runs), logs who
    asked, and is neither shown to nor accepted from a read-only key."""
    cluster.start_worker(slots=1)
    async with httpx.AsyncClient(
        base_url=dashboard_api.base_url, headers=bearer(tokens.acme), timeout=30
    ) as api:
        sid = (await api.post("/v1/sessions", json={})).json()["id"]
        turns = [
            (await api.post(f"/v1/sessions/{sid}/turns", json={"input": given})).json()["turn_id"]
            for given in ({"min_wait_ms": 0, "gate": "stays-shut"}, {"min_wait_ms": 0})
        ]

    async def running() -> bool:
        return bool(await _payloads(pool, sid, "tool.returned"))

    await wait_until(running, what="the gated turn running")
    page = f"/dashboard/sessions/{sid}"
    async with httpx.AsyncClient(base_url=dashboard_api.base_url, timeout=30) as reader:
        await sign_in(reader, tokens.acme_read_only)
        shown = (await reader.get(page)).text
        assert "/interrupt" not in shown
        found = re.search(r'name="csrf" value="([0-9a-f]{64})"', shown)
        assert found
        refused = await reader.post(
            f"{page}/interrupt", data={"csrf": found[1], "turn_id": turns[0]}
        )
        assert refused.status_code == 403
    assert await _payloads(pool, sid, "control.requested") == []
    async with httpx.AsyncClient(base_url=dashboard_api.base_url, timeout=30) as writer:
        await sign_in(writer, tokens.acme)
        shown = (await writer.get(page)).text
        row = shown[shown.index(f'data-turn="{turns[0]}"') :]
        assert "/interrupt" in row[: row.index("</tr>")]  # the running turn's row has it
        found = re.search(r'name="csrf" value="([0-9a-f]{64})"', shown)
        assert found
        without_token = await writer.post(f"{page}/interrupt", data={"turn_id": turns[0]})
        assert without_token.status_code == 403
        done = await writer.post(f"{page}/interrupt", data={"csrf": found[1], "turn_id": turns[0]})
        assert done.status_code == 303 and "interrupt" in done.headers["location"]

    async def statuses() -> list[str] | None:
        rows = await fetch(
            pool, "SELECT status FROM turns WHERE session_id = %s ORDER BY seq", UUID(sid)
        )
        found = [str(row[0]) for row in rows]
        return found if found[-1] == "succeeded" else None

    assert await wait_until(statuses, what="the queued turn ran") == ["interrupted", "succeeded"]
    (requested,) = await _payloads(pool, sid, "control.requested")
    assert requested["action"] == "interrupt"
    assert requested["actor"]["door"] == "dashboard"
    assert requested["actor"]["key_id"] == _key_id(tokens.acme)
    (ended,) = await _payloads(pool, sid, "turn.interrupted")
    assert ended["reason"] == "dashboard"
