"""The dashboard against a real ``stint api`` and real workers; the browser tests
drive Debian's Chromium with Playwright (headless, never a downloaded browser).

Without Chromium (``/usr/bin/chromium``, or ``STINT_CHROMIUM``) or the
playwright package, tests marked ``browser`` are skipped and say why;
``STINT_REQUIRE_BROWSER=1`` (set by ``.ci/run``) turns that skip into a
failure, so a green CI run is evidence they ran.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from _pytest.nodes import Item

from stint.postgres.scratch import ScratchTarget
from stint.store.keys import KeyStore
from stint.store.pool import Pool
from tests.api.conftest import ApiServer, start_api

REQUIRE_ENV = "STINT_REQUIRE_BROWSER"
# What the machine notes ask of Chromium here: no sandbox (root), and none of its
# background connections (the network is closed; they fail loudly and slowly).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    return os.environ.get("STINT_CHROMIUM", "/usr/bin/chromium")


@functools.cache
def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (make setup)"
    path = chromium_path()
    if not (Path(path).is_file() and os.access(path, os.X_OK)) and shutil.which(path) is None:
        return f"no Chromium at {path} (apt-get install chromium, or set STINT_CHROMIUM)"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: Item) -> None:
    if item.get_closest_marker("browser") is None:
        return
    reason = browser_missing()
    if reason is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but the browser tests cannot run: {reason}")
    pytest.skip(f"browser tests not run: {reason}; {REQUIRE_ENV}=1 makes this a failure")


@dataclass(frozen=True)
class Tokens:
    operator: str
    acme: str
    acme_read_only: str
    other: str


@pytest_asyncio.fixture(loop_scope="session")
async def tokens(db: ScratchTarget, pool: Pool) -> Tokens:
    store = KeyStore(db.config, pool)
    return Tokens(
        operator=(await store.keys_create(tenant="ops", operator=True, label="dash")).token,
        acme=(await store.keys_create(tenant="acme")).token,
        acme_read_only=(await store.keys_create(tenant="acme", read_only=True)).token,
        other=(await store.keys_create(tenant="other")).token,
    )


@pytest_asyncio.fixture(loop_scope="session")
async def dashboard_api(db: ScratchTarget, tmp_path: Path) -> AsyncIterator[ApiServer]:
    server = await start_api(db, tmp_path / "api.log")
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


async def sign_in(
    client: httpx.AsyncClient, token: str, next_path: str = "/dashboard/"
) -> httpx.Response:
    """As a browser signs in: the login page first (its form's token, and the cookie
    that goes with it), then the key posted with that token."""
    page = await client.get("/dashboard/login")
    found = re.search(r'name="login" value="([^"]+)"', page.text)
    data = {"key": token, "next": next_path}
    if found:  # (a sign-in form without one is refused: test_dashboard_signin)
        data["login"] = found[1]
    return await client.post("/dashboard/login", data=data)
