"""The dashboard's answer follows /v1's input rules (issue 22, finding 5).

Before: a 700 KB answer was stored (/v1 refuses over STINT_MAX_INPUT_BYTES
with 413), and an answer nested 100,000 deep was a 500 with two tracebacks
per request. Real API and worker processes, a real parked question."""

from __future__ import annotations

import re
from uuid import UUID

import httpx

from stint.store.pool import Pool
from tests.api.conftest import ApiServer, bearer
from tests.dashboard.conftest import Tokens, sign_in
from tests.polling import wait_until
from tests.workers import Cluster, fetch


async def _parked(http: httpx.AsyncClient, pool: Pool) -> tuple[str, str, str]:
    session_id = (await http.post("/v1/sessions", json={})).json()["id"]
    queued = await http.post(
        f"/v1/sessions/{session_id}/turns", json={"input": {"min_wait_ms": 0, "ask": "ok?"}}
    )
    turn_id = queued.json()["turn_id"]

    async def step_key() -> str | None:
        rows = await fetch(
            pool,
            "SELECT step_key FROM steps WHERE turn_id = %s AND kind = 'answer'",
            UUID(turn_id),
        )
        return str(rows[0][0]) if rows else None

    return session_id, turn_id, await wait_until(step_key, what="the turn parked")


async def test_the_dashboards_answer_is_judged_as_v1_judges_one(
    dashboard_api: ApiServer, tokens: Tokens, cluster: Cluster, pool: Pool
) -> None:
    cluster.start_worker(slots=1)
    async with httpx.AsyncClient(
        base_url=dashboard_api.base_url, headers=bearer(tokens.acme), timeout=30
    ) as api:
        session_id, turn_id, step_key = await _parked(api, pool)
    async with httpx.AsyncClient(base_url=dashboard_api.base_url, timeout=30) as browser:
        signed = await sign_in(browser, tokens.acme)
        assert signed.status_code == 303
        page = await browser.get(f"/dashboard/sessions/{session_id}")
        found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
        assert found
        url = f"/dashboard/sessions/{session_id}/answer"
        for answer, said in (
            ('"' + "x" * 700_000 + '"', "larger than the limit"),
            ("[" * 100_000 + "]" * 100_000, "deeper than the limit"),
            ("[" * 100_000, "deeper than the limit"),
            ('{"a": NaN}', "NaN"),
        ):
            refused = await browser.post(
                url, data={"csrf": found[1], "step_key": step_key, "answer": answer}
            )
            assert refused.status_code == 303, refused.text[:300]
            note = httpx.URL(refused.headers["location"]).params["note"]
            assert note.startswith("not answered:") and said in note, note
        rows = await fetch(
            pool,
            "SELECT status FROM steps WHERE turn_id = %s AND step_key = %s",
            UUID(turn_id),
            step_key,
        )
        assert [r[0] for r in rows] == ["started"]  # still waiting for its answer
        answered = await browser.post(
            url, data={"csrf": found[1], "step_key": step_key, "answer": '{"ok": true}'}
        )
        assert "answered" in httpx.URL(answered.headers["location"]).params["note"]
    assert "Traceback" not in dashboard_api.log_text()
