"""The agents harness's model tokens in a worker's /metrics, by scope (the model
name here; a quota scope where quotas are configured), equal to what the provider
reported, as the turn's recorded usage also says."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest

from stint.lab.fake_provider import FakeProvider
from stint.store.pool import Pool
from tests.agents.conftest import API_KEY
from tests.polling import wait_until
from tests.scrape import free_port, scrape, value
from tests.workers import Cluster, fetch

pytestmark = pytest.mark.acceptance


async def test_model_tokens_are_counted_by_scope(
    cluster: Cluster, pool: Pool, fake: FakeProvider
) -> None:
    port = free_port()
    worker = cluster.start_worker(
        slots=1,
        harness="stint.agents:chat",
        model_base_url=fake.url,
        model="fake-model",
        model_api_key=API_KEY,
        health_port=port,
    )
    queued = cluster.stint("enqueue", json.dumps({"message": "What is 19 + 23?"}))
    assert queued.returncode == 0, queued.stderr
    turn_id = json.loads(queued.stdout)["turn_id"]

    async def finished() -> bool:
        rows = await fetch(pool, "SELECT status FROM turns WHERE id = %s", turn_id)
        status: str = rows[0][0]
        return status == "succeeded"

    await wait_until(finished, what="the turn finished", within=60)
    reported = [r.usage for r in fake.requests()]
    page = await wait_until(lambda: scrape(f"http://127.0.0.1:{port}/metrics"), what="metrics")
    scope = {"scope": "fake-model"}
    assert value(page, "stint_model_calls_total", **scope) == len(reported)
    for kind, key in (("input", "prompt_tokens"), ("output", "completion_tokens")):
        expected = sum(u[key] for u in reported)
        assert value(page, "stint_model_tokens_total", kind=kind, **scope) == expected
    assert API_KEY not in json.dumps(page and {str(k): v for k, v in page.items()})
    worker.signal(signal.SIGTERM)
    assert await asyncio.to_thread(worker.wait) == 0
