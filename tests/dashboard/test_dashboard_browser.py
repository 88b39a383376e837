"""The dashboard in Chromium (Playwright, headless), against a real API and real
workers: sign in, read the overview and the workers, filter sessions, watch a
turn's events arrive live, answer a parked question, cancel a running turn; see a
parent's tree of children and what it waits on, signal a waiting child from its page.

Screenshots go to the test's folder; ``STINT_WRITE_SCREENSHOTS=1`` also
writes them to docs/dashboard/ (docs/guide/observability.md shows them).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from stint.store.pool import Pool
from tests.api.conftest import ApiServer, bearer
from tests.dashboard.conftest import CHROMIUM_ARGS, Tokens, chromium_path
from tests.polling import wait_until
from tests.workers import Cluster, fetch

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "dashboard"
TIMEOUT_MS = 30_000


@pytest_asyncio.fixture(loop_scope="session")
async def chromium() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=TIMEOUT_MS)  # a deadline to poll within, not a wait

    async with async_playwright() as driver:
        browser = await driver.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


async def _shot(page: Any, name: str, folder: Path) -> None:
    path = folder / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    if os.environ.get("STINT_WRITE_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        (DOCS / f"{name}.png").write_bytes(path.read_bytes())


async def _sign_in(page: Any, base: str, token: str) -> None:
    await page.goto(f"{base}/dashboard/")
    await page.wait_for_url("**/dashboard/login**")
    await page.fill("#key", token)
    await page.click("button[type=submit]")


async def _status(pool: Pool, turn_id: str) -> str:
    return str((await fetch(pool, "SELECT status FROM turns WHERE id = %s", turn_id))[0][0])


async def test_operator_watches_answers_and_cancels_in_the_browser(
    cluster: Cluster,
    pool: Pool,
    dashboard_api: ApiServer,
    tokens: Tokens,
    chromium: Any,
    tmp_path: Path,
) -> None:
    from playwright.async_api import expect

    base = dashboard_api.base_url
    for _ in range(2):
        cluster.start_worker(slots=2, sample_seconds=0.25)
    api = httpx.AsyncClient(base_url=base, headers=bearer(tokens.acme), timeout=30)

    async def enqueue(session: str, turn_input: dict[str, Any]) -> str:
        queued = await api.post(f"/v1/sessions/{session}/turns", json={"input": turn_input})
        assert queued.status_code == 201, queued.text
        turn_id: str = queued.json()["turn_id"]
        return turn_id

    # Some traffic first, so the overview's chart has a line to draw.
    warm = [(await api.post("/v1/sessions", json={})).json()["id"] for _ in range(6)]
    warm_turns = [await enqueue(s, {"min_wait_ms": 100}) for s in warm for _ in range(2)]
    session = (await api.post("/v1/sessions", json={})).json()["id"]

    context = await chromium.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    try:
        await _sign_in(page, base, tokens.operator)
        await page.wait_for_url(f"{base}/dashboard/")
        await expect(page.locator("#queue-depth")).to_be_visible()
        for turn in warm_turns:
            await wait_until(partial(_finished, pool, turn), what="the warm-up finished")
        await expect(page.locator("svg.chart polyline")).to_be_visible()  # refreshed in place
        await expect(page.locator("#slots")).to_contain_text("/ 4")
        await _shot(page, "overview", tmp_path)

        await page.click("nav >> text=Workers")
        await expect(page.locator("#workers tbody tr")).to_have_count(2)
        await expect(page.locator("#workers .badge.running")).to_have_count(2)
        await _shot(page, "workers", tmp_path)

        await page.click("nav >> text=Sessions")
        await page.select_option("select[name=tenant]", "acme")
        await page.check("input[name=status][value=idle]")
        await page.click("form.filters button")
        await expect(page.locator(f"#sessions >> text={session}")).to_be_visible()
        await _shot(page, "sessions", tmp_path)

        # A turn's events arrive while the page stays put (no reload: the marker stays).
        await page.click(f"#sessions >> text={session}")
        await expect(page.locator("#stream-state")).to_have_text("live")
        await page.evaluate("window.stayed = true")
        live = await enqueue(session, {"min_wait_ms": 400})
        events = page.locator("#events li .kind")
        for kind in ("turn.started", "tool.called", "tool.returned", "turn.completed"):
            await expect(events.filter(has_text=kind)).to_have_count(1)
        assert await page.evaluate("window.stayed") is True
        assert await _status(pool, live) == "succeeded"

        # A parked question appears (the panels refresh on approval.requested); answer it.
        asked = await enqueue(session, {"min_wait_ms": 0, "ask": "Ship the release?"})
        question = page.locator(".question")
        await expect(question).to_contain_text("Ship the release?")
        await _shot(page, "session-question", tmp_path)
        await question.locator("input[name=answer]").fill("yes")
        await question.locator("button >> text=Answer").click()
        await expect(page.locator(".note")).to_contain_text("answered")
        await expect(
            page.locator("#events li .kind").filter(has_text="turn.completed")
        ).to_have_count(2)
        await wait_until(lambda: _finished(pool, asked), what="the answered turn finished")
        output = (await fetch(pool, "SELECT output FROM turns WHERE id = %s", asked))[0][0]
        assert output["answer"] == "yes"

        # A running turn (held at a gate that never opens) is cancelled from its row.
        running = await enqueue(session, {"gate": "never-opens"})
        await expect(events.filter(has_text="tool.returned")).to_have_count(3)
        row = page.locator(f'#turns tr[data-turn="{running}"]')
        await expect(row.locator(".badge.running")).to_have_count(1)
        await row.locator("button >> text=Cancel").click()
        await expect(page.locator(".note")).to_contain_text("cancel: requested from worker")
        await expect(events.filter(has_text="turn.cancelled")).to_have_count(1)
        assert await _status(pool, running) == "cancelled"
        await expect(page.locator("#turns .badge.cancelled")).to_have_count(1)
        await expect(page.locator("#journal tbody tr")).to_have_count(4)
        await _shot(page, "session", tmp_path)
    finally:
        await context.close()
        await api.aclose()


async def _finished(pool: Pool, turn_id: str) -> bool:
    return await _status(pool, turn_id) in ("succeeded", "failed", "cancelled", "interrupted")


async def test_a_tenant_sees_only_its_sessions_in_the_browser(
    cluster: Cluster, dashboard_api: ApiServer, tokens: Tokens, chromium: Any
) -> None:
    from playwright.async_api import expect

    base = dashboard_api.base_url
    async with httpx.AsyncClient(base_url=base, timeout=30) as api:
        mine = (await api.post("/v1/sessions", headers=bearer(tokens.acme), json={})).json()["id"]
        other = (await api.post("/v1/sessions", headers=bearer(tokens.other), json={})).json()
    context = await chromium.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    try:
        await _sign_in(page, base, tokens.acme)
        await page.wait_for_url(f"{base}/dashboard/sessions")
        await expect(page.locator("nav a")).to_have_count(1)  # Sessions only
        await expect(page.locator(f"#sessions >> text={mine}")).to_be_visible()
        assert json.dumps(other["id"]) not in await page.content()
        await page.goto(f"{base}/dashboard/workers")
        await expect(page.locator(".error")).to_contain_text("operator key")
        cookies = await context.cookies()
        (cookie,) = [c for c in cookies if c["name"] == "stint_dashboard"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert await page.evaluate("document.cookie") == ""  # scripts cannot read the key
    finally:
        await context.close()


async def test_a_signal_from_the_page_resumes_a_child_and_the_parents_tree_shows_it(
    cluster: Cluster,
    pool: Pool,
    dashboard_api: ApiServer,
    tokens: Tokens,
    chromium: Any,
    tmp_path: Path,
) -> None:
    """A parent joins two children that each wait for the signal ``go``: the parent's
    page draws the tree and the join; a child's page sends ``go``; the tree follows."""
    from playwright.async_api import expect

    base = dashboard_api.base_url
    cluster.start_worker(slots=2)
    api = httpx.AsyncClient(base_url=base, headers=bearer(tokens.acme), timeout=30)
    parent = (await api.post("/v1/sessions", json={})).json()["id"]
    child_input = {"min_wait_ms": 0, "wait_for": "go"}
    queued = await api.post(
        f"/v1/sessions/{parent}/turns",
        json={"input": {"min_wait_ms": 0, "spawn": {"count": 2, "input": child_input}}},
    )
    assert queued.status_code == 201, queued.text
    parent_turn = queued.json()["turn_id"]
    context = await chromium.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    try:
        await _sign_in(page, base, tokens.acme)
        await page.wait_for_url(f"{base}/dashboard/sessions")
        await page.goto(f"{base}/dashboard/sessions/{parent}")
        tree = page.locator("#tree li.child")
        # The panels follow the parent's events (child.started, wait.started) in place.
        await expect(tree).to_have_count(2)
        await expect(tree.locator(".badge.queued")).to_have_count(2)  # each set aside, waiting
        await expect(page.locator("#tree")).to_contain_text("on cancel: cascade")
        join = page.locator('#waits .wait[data-kind="children"]')
        await expect(join).to_contain_text("all of 2 children (0 ended)")
        await _shot(page, "session-tree", tmp_path)

        first = await tree.first.get_attribute("data-session")
        await tree.first.locator("a").first.click()
        await page.wait_for_url(f"{base}/dashboard/sessions/{first}")
        await expect(page.locator('#waits .wait[data-kind="signal"]')).to_contain_text("go")
        await expect(page.locator("#stream-state")).to_have_text("live")
        await page.fill("#signal-name", "go")
        await page.fill("#signal-payload", '{"ok": true}')
        await page.click("#signal-form button[type=submit]")
        await expect(page.locator(".note")).to_contain_text("signal go sent")
        await expect(
            page.locator("#events li .kind").filter(has_text="turn.completed")
        ).to_have_count(1)
        await expect(page.locator("#turns .badge.succeeded")).to_have_count(1)
        await _shot(page, "session-signalled", tmp_path)

        await page.click("#parent-link")
        await page.wait_for_url(f"{base}/dashboard/sessions/{parent}")
        done = page.locator(f'#tree li.child[data-session="{first}"] .badge.succeeded')
        await expect(done).to_have_count(1)
        await expect(join).to_contain_text("all of 2 children (1 ended)")
        # The other child's signal from the API: the parent's page follows to the end.
        second = await tree.nth(1).get_attribute("data-session")
        sent = await api.post(f"/v1/sessions/{second}/signals/go", json={"payload": 2})
        assert sent.status_code == 201, sent.text
        await expect(tree.locator(".badge.succeeded")).to_have_count(2)
        await expect(
            page.locator("#events li .kind").filter(has_text="turn.completed")
        ).to_have_count(1)
        await expect(page.locator("#waits")).to_contain_text("Nothing.")
        output = (await fetch(pool, "SELECT output FROM turns WHERE id = %s", parent_turn))[0][0]
        assert [(c["id"], c["status"]) for c in output["children"]] == [
            (first, "succeeded"),
            (second, "succeeded"),
        ]
        assert output["children"][0]["output"]["signal"]["payload"] == {"ok": True}
    finally:
        await context.close()
        await api.aclose()
