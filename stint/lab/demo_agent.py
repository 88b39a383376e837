"""``stint-lab demo --agent``: a real tool-calling conversation, streaming, with no API key.

Starts the fake OpenAI-compatible provider (``stint.lab.fake_provider``) in
this process and one ``worker`` running ``stint.agents:chat`` against it, in a
schema of its own that each run resets. Then it holds a short conversation on
one session: a calculator tool, the native journal tool, a tool that needs
approval (the demo answers it, as ``stint answer`` would), and a question that
only memory can answer. Everything printed comes from the session's event log
as a follower sees it: token deltas as they are written, tool calls, the park.

The examples in ``examples/`` hold their own conversation with their own
harness the same way (``AgentDemo``); with ``OPENAI_BASE_URL`` set they talk
to that provider instead of the fake (``OPENAI_API_KEY``, ``OPENAI_MODEL``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

import uvloop

from stint.config.logs import setup_logging
from stint.config.settings import Settings, load_settings
from stint.config.target import resolve_store_config, workspace_dir
from stint.errors import StintError
from stint.lab.fake_provider import FakeProvider
from stint.lab.fake_script import DEMO_SCRIPT, FakeScript
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

__all__ = ["CONVERSATION", "AgentDemo", "run_agent_demo", "run_example"]

DEMO_SCHEMA = "stint_demo_agent"
CONVERSATION = (
    "What is 19 + 23?",
    "Please note that down.",
    "Please deploy the web service.",
    "Thanks. What do you remember?",
)
_TERMINAL = {str(kind) for kind in EventKind if kind.terminal}
_TURN_SECONDS = 60.0
_REAL_MODEL = "gpt-4o-mini"


@dataclass(frozen=True)
class AgentDemo:
    """A conversation to hold with a harness: the agents harness's by default."""

    harness: str = "stint.agents:chat"
    conversation: tuple[str, ...] = CONVERSATION
    script: FakeScript | None = None  # what the fake provider answers (None: its demo script)
    schema: str = DEMO_SCHEMA
    name: str = "demo-agent"  # the workspace folder
    env: Mapping[str, str] = field(default_factory=dict)  # more for the worker


async def run_agent_demo(
    settings: Settings, *, token_delay_ms: int = 40, demo: AgentDemo | None = None
) -> int:
    demo = demo or AgentDemo()
    config = replace(resolve_store_config(settings), schema=demo.schema)
    await reset_schema(config)
    workspace = workspace_dir(settings) / demo.name
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    real = os.environ.get("OPENAI_BASE_URL")
    script = demo.script or DEMO_SCRIPT
    fake = None if real else FakeProvider(script, token_delay_ms=token_delay_ms)
    if fake is None:
        url, model = str(real), os.environ.get("OPENAI_MODEL", _REAL_MODEL)
        print(f"provider {url} (OPENAI_BASE_URL), model {model}; schema {demo.schema}")
    else:
        url, model = await fake.start(), "fake-model"
        print(f"fake OpenAI-compatible provider at {url} (no key); schema {demo.schema}")
    env = {
        "STINT_DATABASE_URL": config.conninfo,
        "STINT_SCHEMA": demo.schema,
        "STINT_WORKSPACE": str(workspace),
        "STINT_HARNESS": demo.harness,
        "STINT_MODEL_BASE_URL": url,
        "STINT_MODEL": model,
        **(
            {"STINT_MODEL_API_KEY": os.environ["OPENAI_API_KEY"]}
            if real and "OPENAI_API_KEY" in os.environ
            else {}
        ),
        **demo.env,
    }
    worker = spawn_worker(env=env, args=["--slots", "2"], log_path=workspace / "worker.log")
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=3)
    try:
        session = await _converse(config, pool, demo.conversation)
        codes = stop_workers([worker])
        report = await run_checks(pool, journals=workspace / "journals")
        usage = await UsageStore(config, pool).session_usage(session_id=session)
    finally:
        stop_workers([worker])
        await pool.close()
        if fake is not None:
            await fake.stop()
    totals = sum_usage(usage.turns) if usage else {}
    print(f"\nsession {session}: usage {json.dumps(totals)}")
    seen = "-" if fake is None else str(len(fake.requests()))
    print(f"model requests the provider saw: {seen}; checks passed: {report.passed}")
    print(f"see it again: stint --schema {demo.schema} show {session}; worker log in {workspace}")
    ok = usage is not None and all(t.status == "succeeded" for t in usage.turns)
    return 0 if ok and report.passed and codes == [0] else 1


def run_example(demo: AgentDemo) -> int:
    """The one command of an example in ``examples/``: its conversation, with the
    embedded PostgreSQL (or ``STINT_DATABASE_URL``) and the fake provider (or
    ``OPENAI_BASE_URL``). Exit 0 when every turn succeeded and the checks passed."""
    settings = load_settings()
    setup_logging(settings.log_level, secrets=settings.secrets(), fmt=settings.log_format)
    try:
        return uvloop.run(run_agent_demo(settings, demo=demo))
    except KeyboardInterrupt:
        return 130
    except StintError as exc:
        print(f"{demo.name}: {exc}", file=sys.stderr)
        return 1


async def _converse(config: StoreConfig, pool: Pool, conversation: tuple[str, ...]) -> UUID:
    client = ClientStore(config, pool)
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    follower: asyncio.Task[int] | None = None
    session: UUID | None = None
    try:
        for n, message in enumerate(conversation):
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
