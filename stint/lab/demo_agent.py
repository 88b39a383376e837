"""``stint-lab demo --agent``: a real tool-calling conversation, streaming, with no API key.

Starts the fake OpenAI-compatible provider (``stint.lab.fake_provider``) in
this process and one ``worker`` running ``stint.agents:chat`` against it, in a
schema of its own that each run resets. Then it holds a short conversation on
one session: a calculator tool, the native journal tool, a tool that needs
approval (the demo answers it, as ``stint answer`` would), and a question that
only memory can answer. Everything printed comes from the session's event log
as a follower sees it: token deltas as they are written, tool calls, the park.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import replace
from typing import Any
from uuid import UUID

from stint.config.settings import Settings
from stint.config.target import resolve_store_config, workspace_dir
from stint.lab.fake_provider import FakeProvider
from stint.lab.processes import spawn_worker, stop_workers
from stint.ops.checks import run_checks
from stint.ops.follow import follow_events
from stint.ops.show import sum_usage
from stint.postgres.scratch import reset_schema
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.controls import ControlStore
from stint.store.pool import Pool, open_pool
from stint.store.usage import UsageStore
from stint.store.vocabulary import EventKind

__all__ = ["CONVERSATION", "run_agent_demo"]

DEMO_SCHEMA = "stint_demo_agent"
CONVERSATION = (
    "What is 19 + 23?",
    "Please note that down.",
    "Please deploy the web service.",
    "Thanks. What do you remember?",
)
_TERMINAL = {str(kind) for kind in EventKind if kind.terminal}
_TURN_SECONDS = 60.0


async def run_agent_demo(settings: Settings, *, token_delay_ms: int = 40) -> int:
    config = replace(resolve_store_config(settings), schema=DEMO_SCHEMA)
    await reset_schema(config)
    workspace = workspace_dir(settings) / "demo-agent"
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    fake = FakeProvider(token_delay_ms=token_delay_ms)
    url = await fake.start()
    print(f"fake OpenAI-compatible provider at {url} (no key); schema {DEMO_SCHEMA}")
    env = {
        "STINT_DATABASE_URL": config.conninfo,
        "STINT_SCHEMA": DEMO_SCHEMA,
        "STINT_WORKSPACE": str(workspace),
        "STINT_HARNESS": "stint.agents:chat",
        "STINT_MODEL_BASE_URL": url,
        "STINT_MODEL": "fake-model",
    }
    worker = spawn_worker(env=env, args=["--slots", "2"], log_path=workspace / "worker.log")
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=3)
    try:
        session = await _converse(config, pool)
        codes = stop_workers([worker])
        report = await run_checks(pool, journals=workspace / "journals")
        usage = await UsageStore(config, pool).session_usage(session_id=session)
    finally:
        stop_workers([worker])
        await pool.close()
        await fake.stop()
    totals = sum_usage(usage.turns) if usage else {}
    print(f"\nsession {session}: usage {json.dumps(totals)}")
    print(
        f"model requests the provider saw: {len(fake.requests())}; checks passed: {report.passed}"
    )
    print(f"see it again: stint --schema {DEMO_SCHEMA} show {session}; worker log in {workspace}")
    ok = usage is not None and all(t.status == "succeeded" for t in usage.turns)
    return 0 if ok and report.passed and codes == [0] else 1


async def _converse(config: StoreConfig, pool: Pool) -> UUID:
    client = ClientStore(config, pool)
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    follower: asyncio.Task[int] | None = None
    session: UUID | None = None
    try:
        for n, message in enumerate(CONVERSATION):
            turn = await client.turns_enqueue(
                session_id=session,
                idempotency_key=f"demo-{n}",
                turn_input={"message": message},
            )
            if session is None:
                session = turn.session_id
                follower = asyncio.create_task(
                    follow_events(
                        client,
                        config,
                        session_id=session,
                        after=0,
                        follow=True,
                        emit=events.put_nowait,
                    )
                )
            print(f"\nyou:   {message}\nagent: ", end="", flush=True)
            async with asyncio.timeout(_TURN_SECONDS):
                await _show_turn(events, str(turn.turn_id), ControlStore(config, pool), session)
    finally:
        if follower is not None:
            follower.cancel()
    assert session is not None
    return session


async def _show_turn(
    events: asyncio.Queue[dict[str, Any]], turn_id: str, controls: ControlStore, session: UUID
) -> None:
    """Print one turn's events as they arrive, until its terminal event."""
    while True:
        event = await events.get()
        if event["turn_id"] != turn_id:
            continue
        kind, payload = event["kind"], event["payload"]
        if kind == "message.delta":
            print(payload["text"], end="", flush=True)
        elif kind == "tool.called":
            print(f"[calling {payload['name']}] ", end="", flush=True)
        elif kind == "model.retried":
            print(f"[provider said {payload['reason']}; retrying] ", end="", flush=True)
        elif kind == "approval.requested":
            question = json.dumps(payload["question"])
            print(f"\n       [parked: approve {question}? the slot is free meanwhile]")
            print(f"       $ stint answer {session} {payload['step_key']} '\"yes\"'")
            await controls.answer(session_id=session, step_key=payload["step_key"], answer="yes")
            print("agent: ", end="", flush=True)
        elif kind in _TERMINAL:
            print(f"   ({kind})" if kind != "turn.completed" else "")
            return
