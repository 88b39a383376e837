"""A session's tree of children on its dashboard page, over plain HTTP: its parent,
its children and theirs with their latest turn's status, depth and policy, bounded
so that a tree of 1,000 children makes a page of 100 sessions that counts the rest;
tenant-checked like the rest of the dashboard.

The trees are written as spawns leave them (sessions with their parent and depth,
a first turn each, the ``children`` links), in one statement per level: a tree of
1,010 sessions spawned by real workers would take minutes on two cores, and what
is tested here is what the page reads, not how the rows came to be
(tests/acceptance/test_children.py tests that)."""

from __future__ import annotations

import re
from uuid import UUID

import httpx

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.dashboard import DashboardStore
from stint.store.dashboard_tree import TreeBounds
from stint.store.pool import Pool
from tests.api.conftest import ApiServer
from tests.dashboard.conftest import Tokens, sign_in
from tests.workers import fetch

_SPAWN_LEVEL = """
WITH made AS (
    INSERT INTO sessions (tenant, parent_id, depth, status, last_turn_seq)
    SELECT p.tenant, p.id, p.depth + 1, 'idle', 1
    FROM sessions p
    CROSS JOIN generate_series(1, %(count)s)
    WHERE p.id = ANY (%(parents)s::uuid[])
    RETURNING id, parent_id
), turned AS (
    INSERT INTO turns (session_id, seq, idempotency_key, input, status, finished_at)
    SELECT id, 1, 'spawn', '{}', %(status)s,
           CASE WHEN %(status)s = 'succeeded' THEN now() END
    FROM made
    RETURNING id, session_id
)
INSERT INTO children (parent_id, parent_turn_id, step_key, child_id, child_turn_id, on_cancel)
SELECT made.parent_id, gen_random_uuid(), 'spawn:' || made.id, made.id, turned.id,
       %(on_cancel)s
FROM made JOIN turned ON turned.session_id = made.id
RETURNING child_id
"""


async def _spawn_level(
    pool: Pool,
    parents: list[UUID],
    count: int,
    *,
    status: str = "succeeded",
    on_cancel: str = "cascade",
) -> list[UUID]:
    """``count`` children under each of ``parents``, as ``children_spawn`` leaves them."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            _SPAWN_LEVEL,
            {"parents": parents, "count": count, "status": status, "on_cancel": on_cancel},
        )
        return [row[0] for row in await cur.fetchall()]


async def _children_by_age(pool: Pool, parent: UUID) -> list[UUID]:
    rows = await fetch(
        pool,
        "SELECT child_id FROM children WHERE parent_id = %s ORDER BY created_at, child_id",
        parent,
    )
    return [row[0] for row in rows]


def _shown(html: str) -> list[str]:
    """The sessions the page's tree shows, in the page's order."""
    return re.findall(r'<li class="child" data-session="([0-9a-f-]{36})"', html)


def _mores(html: str) -> list[str]:
    return re.findall(r'<li class="more">([^<]*?) more', html)


async def _page(client: httpx.AsyncClient, session_id: UUID) -> str:
    page = await client.get(f"/dashboard/sessions/{session_id}")
    assert page.status_code == 200, page.text[:300]
    return page.text


async def test_a_thousand_child_tree_is_drawn_within_its_bounds(
    dashboard_api: ApiServer, tokens: Tokens, db: ScratchTarget, pool: Pool
) -> None:
    """1 session, 10 children, 100 children each: the page shows 100 sessions and
    says how many it leaves out under each."""
    root = (
        await ClientStore(db.config, pool).turns_enqueue(
            session_id=None, idempotency_key="root", turn_input={}, tenant="acme"
        )
    ).session_id
    level_1 = await _spawn_level(pool, [root], 10, on_cancel="abandon")
    await _spawn_level(pool, level_1, 100, status="queued")
    first = (await _children_by_age(pool, root))[0]
    async with httpx.AsyncClient(base_url=dashboard_api.base_url, timeout=30) as client:
        assert (await sign_in(client, tokens.acme)).status_code == 303
        html = await _page(client, root)
        shown = _shown(html)
        # Breadth first within 100 sessions: the 10 children, then 20 under each of
        # the first four, 10 under the fifth, none under the last five.
        assert len(shown) == len(set(shown)) == 100
        assert shown[0] == str(first)
        assert _mores(html) == ["80"] * 4 + ["90"] + ["100"] * 5
        assert "10 children" in html
        assert html.count("on cancel: abandon") == 10 and html.count("on cancel: cascade") == 90
        assert html.count('<span class="badge succeeded" title="its latest turn') == 10
        assert html.count('<span class="badge queued" title="its latest turn') == 90
        assert html.count("depth 2 ·") == 90
        # A child's page: its parent, and its own 100 children, 20 shown.
        child_html = await _page(client, first)
        assert f'id="parent-link"><code>{root}</code>' in child_html
        assert len(_shown(child_html)) == 20 and _mores(child_html) == ["80"]
        assert "100 children" in child_html and "depth 1 ·" in child_html
    async with httpx.AsyncClient(base_url=dashboard_api.base_url, timeout=30) as other:
        assert (await sign_in(other, tokens.other)).status_code == 303
        assert (await other.get(f"/dashboard/sessions/{root}")).status_code == 404
    async with httpx.AsyncClient(base_url=dashboard_api.base_url, timeout=30) as operator:
        assert (await sign_in(operator, tokens.operator)).status_code == 303
        assert len(_shown(await _page(operator, root))) == 100
    # The store's own check: another tenant's reader gets no tree of this session.
    dashboard = DashboardStore(db.config, pool)
    assert (await dashboard.children_tree(session_id=root, tenant="acme")).total == 10
    foreign = await dashboard.children_tree(session_id=root, tenant="other")
    assert (foreign.total, foreign.children) == (0, ())
    # Children are counted up to the cap and no further ("50+ more").
    capped = await dashboard.children_tree(
        session_id=first, tenant="acme", bounds=TreeBounds(count_cap=50)
    )
    assert (capped.total, capped.more, capped.capped(capped.total)) == (50, 30, True)


async def test_a_deep_chain_is_cut_after_three_levels_and_says_what_is_below(
    dashboard_api: ApiServer, tokens: Tokens, db: ScratchTarget, pool: Pool
) -> None:
    root = (
        await ClientStore(db.config, pool).turns_enqueue(
            session_id=None, idempotency_key="root", turn_input={}, tenant="acme"
        )
    ).session_id
    chain = [root]
    for _ in range(5):
        chain += await _spawn_level(pool, [chain[-1]], 1)
    async with httpx.AsyncClient(base_url=dashboard_api.base_url, timeout=30) as client:
        assert (await sign_in(client, tokens.acme)).status_code == 303
        html = await _page(client, root)
        assert _shown(html) == [str(s) for s in chain[1:4]]
        assert _mores(html) == ["1"]  # under the third level: one more, on its own page
        assert f'<li class="more">1 more (<a href="/dashboard/sessions/{chain[3]}">' in html
        deepest = await _page(client, chain[5])
        assert f'id="parent-link"><code>{chain[4]}</code>' in deepest
        assert "depth 5 ·" in deepest and "no children" in deepest
