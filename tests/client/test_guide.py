"""The guides' Python examples (the HTTP API's "From Python", the schedules' client
example) run as written against a real API (and worker)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stint.store.pool import Pool
from tests.api.conftest import ApiServer, Keys
from tests.workers import Cluster, fetch

pytestmark = pytest.mark.acceptance

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "http-api.md"


def _examples() -> list[str]:
    section = GUIDE.read_text().split("## From Python\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)


def test_the_guide_has_a_sync_and_an_async_example() -> None:
    examples = _examples()
    assert len(examples) == 2 and "AsyncClient" in examples[1]


@pytest.mark.parametrize("index", [0, 1], ids=["sync", "async"])
async def test_each_example_runs_a_turn_to_its_end(
    index: int, api: ApiServer, keys: Keys, cluster: Cluster, pool: Pool
) -> None:
    cluster.start_worker(slots=1)
    env = {**os.environ, "STINT_URL": api.base_url, "STINT_API_KEY": keys.a}
    ran = subprocess.run(
        [sys.executable, "-c", _examples()[index]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[:4] == ["1 turn.started", "2 tool.called", "3 tool.returned", "4 turn.completed"]
    rows = await fetch(pool, "SELECT status FROM turns")
    assert rows == [("succeeded",)]
    if index == 0:
        assert lines[4].startswith("succeeded {")


AUTOMATION = GUIDE.parent / "schedules-webhooks.md"


async def test_the_schedules_guide_example_runs(api: ApiServer, keys: Keys, pool: Pool) -> None:
    blocks = re.findall(
        r"^```python\n(.*?)^```$", AUTOMATION.read_text(), flags=re.MULTILINE | re.DOTALL
    )
    example = next(b for b in blocks if "from stint.client import Client" in b)
    env = {**os.environ, "STINT_URL": api.base_url, "STINT_API_KEY": keys.a}
    ran = subprocess.run(
        [sys.executable, "-c", example],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    rows = await fetch(pool, "SELECT name, cron, timezone, paused_at IS NOT NULL FROM schedules")
    assert rows == [("daily-report", "30 9 * * 1-5", "America/New_York", True)]
