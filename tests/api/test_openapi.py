"""The OpenAPI spec is committed (docs/openapi.json) and must match the app's.

To change the API: change the code, then STINT_WRITE_OPENAPI=1 pytest
tests/api/test_openapi.py rewrites the file; review its diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from stint.api.app import create_app
from stint.config.settings import Settings
from stint.store.config import StoreConfig
from tests.api.conftest import ApiServer

SPEC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def render() -> str:
    spec = create_app(Settings(), StoreConfig(conninfo="")).openapi()
    return json.dumps(spec, indent=2, sort_keys=True) + "\n"


def test_the_committed_spec_is_current() -> None:
    drawn = render()
    if os.environ.get("STINT_WRITE_OPENAPI"):
        SPEC.write_text(drawn)
    assert SPEC.read_text() == drawn, "docs/openapi.json is stale: STINT_WRITE_OPENAPI=1 rewrites"


async def test_the_running_api_serves_the_committed_spec(api: ApiServer) -> None:
    async with httpx.AsyncClient(base_url=api.base_url) as client:
        served = (await client.get("/openapi.json")).json()
    assert served == json.loads(SPEC.read_text())
