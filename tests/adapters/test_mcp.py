"""MCP tools as durable steps: real workers, a stdio server and a remote one, kill -9.

The MCP server (``tests.adapters.mcp_server``, written with the official SDK)
appends one line per ``append_note`` call to an effects file, so every test
asserts from the file itself that no call ran twice. ``stint.agents:chat``
offers the servers' tools beside its own (``STINT_MCP_SERVERS``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import psutil
import pytest

from stint.lab.fake_provider import FakeProvider
from stint.lab.fake_script import FakeCall, FakeRule, FakeScript
from stint.lab.proxy import FaultProxy
from stint.ops.checks import run_checks
from stint.store.pool import Pool
from tests.adapters.effects import EFFECTS_ENV, read_effects
from tests.polling import wait_until
from tests.turns import (
    agent_worker,
    assert_checks,
    enqueue,
    payloads,
    turn_row,
    until_finished,
)
from tests.workers import Cluster, WorkerProc

pytestmark = pytest.mark.acceptance

NOTES_SCRIPT = FakeScript(
    (
        FakeRule(
            when="remember",
            rounds=((FakeCall("append_note", {"text": "buy milk"}),),),
            reply="Done: {results}",
        ),
        FakeRule(when="count", rounds=((FakeCall("count_notes", {}),),), reply="{results}"),
        FakeRule(
            when="leak",
            rounds=(
                (
                    FakeCall("sees", {"variable": "STINT_DATABASE_URL"}),
                    FakeCall("sees", {"variable": "STINT_MODEL_API_KEY"}),
                    FakeCall("sees", {"variable": EFFECTS_ENV}),
                ),
            ),
            reply="{results}",
        ),
    )
)
SERVER = [sys.executable, "-m", "tests.adapters.mcp_server"]


@pytest.fixture
def notes_fake() -> Iterator[FakeProvider]:
    provider = FakeProvider(NOTES_SCRIPT)
    with provider.running():
        yield provider


def _servers_file(tmp_path: Path, *servers: dict[str, Any]) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"servers": list(servers)}))
    return path


def _stdio(tmp_path: Path, effects: Path, **more: Any) -> Path:
    """The test server over stdio; it gets the effects file through the servers file
    (a stdio server sees none of the worker's environment)."""
    server = {"name": "notes", "command": SERVER[0], "args": SERVER[1:], **more}
    return _servers_file(tmp_path, {**server, "env": {EFFECTS_ENV: str(effects)}})


def _worker(
    cluster: Cluster,
    fake: FakeProvider,
    servers: Path,
    *,
    slots: int = 2,
    harness: str = "stint.agents:chat",
    **env: Any,
) -> WorkerProc:
    return agent_worker(
        cluster, fake, harness=harness, slots=slots, mcp_servers=str(servers), **env
    )


def _servers_of(worker: WorkerProc) -> list[int]:
    """The MCP server processes the worker started (its children running the server)."""
    found = []
    for child in psutil.Process(worker.pid).children(recursive=True):
        try:
            if "tests.adapters.mcp_server" in " ".join(child.cmdline()):
                found.append(child.pid)
        except psutil.NoSuchProcess:  # a short-lived child that has ended since
            continue
    return found


@pytest.mark.parametrize(
    ("failpoint", "status", "notes"),
    [
        ("mcp_before_call", "failed", 0),  # started, not sent: cannot tell, surfaced
        ("mcp_after_call", "failed", 1),  # ran, not journaled: surfaced, never run again
        ("after_tool_step", "succeeded", 1),  # committed: replayed from the journal
    ],
)
async def test_a_kill_at_each_boundary_of_an_mcp_call_never_runs_it_twice(
    cluster: Cluster,
    pool: Pool,
    notes_fake: FakeProvider,
    tmp_path: Path,
    failpoint: str,
    status: str,
    notes: int,
) -> None:
    effects = tmp_path / "notes.jsonl"
    servers = _stdio(tmp_path, effects)
    victim = _worker(cluster, notes_fake, servers, failpoints=f"{failpoint}:kill")
    turn = enqueue(cluster, "Please remember to buy milk.")
    assert victim.wait() == -signal.SIGKILL, victim.log_text()
    assert len(read_effects(effects)) == notes
    rescuer = _worker(cluster, notes_fake, servers)
    assert await until_finished(pool, turn["turn_id"]) == status, rescuer.log_text()
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait() == 0
    assert len(read_effects(effects)) == notes  # nothing ran again
    sid = turn["session_id"]
    unknown = await payloads(pool, sid, "effect.unknown")
    _, attempts, output, error = await turn_row(pool, turn["turn_id"])
    assert attempts == 2
    if status == "succeeded":
        assert output["reply"] == "Done: noted: buy milk"
        assert unknown == []
    else:
        assert error is not None and "unknown effect" in error
        assert [u["step_key"] for u in unknown] == [f"{turn['turn_id']}:tool:0.0"]
    journals = cluster.workspace / "journals"
    journals.mkdir(exist_ok=True)  # made on the first journal line; none when nothing ran
    report = await run_checks(pool, journals=journals, faults={UUID(sid): 1})
    assert report.passed, [c for c in report.as_json()["checks"] if not c["passed"]]


async def test_a_read_only_mcp_tool_cut_off_by_a_kill_simply_runs_again(
    cluster: Cluster, pool: Pool, notes_fake: FakeProvider, tmp_path: Path
) -> None:
    servers = _stdio(tmp_path, tmp_path / "notes.jsonl")
    victim = _worker(cluster, notes_fake, servers, failpoints="mcp_after_call:kill")
    turn = enqueue(cluster, "How many notes? count them")
    assert victim.wait() == -signal.SIGKILL
    rescuer = _worker(cluster, notes_fake, servers)
    assert await until_finished(pool, turn["turn_id"]) == "succeeded", rescuer.log_text()
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait() == 0
    _, _, output, _ = await turn_row(pool, turn["turn_id"])
    assert output["reply"] == "0 notes"
    assert await payloads(pool, turn["session_id"], "effect.unknown") == []


async def test_one_stdio_server_per_worker_restarted_if_it_dies_stopped_on_drain(
    cluster: Cluster, pool: Pool, notes_fake: FakeProvider, tmp_path: Path
) -> None:
    effects = tmp_path / "notes.jsonl"
    worker = _worker(cluster, notes_fake, _stdio(tmp_path, effects), slots=3)
    first = [enqueue(cluster, f"Please remember this, {n}.") for n in range(3)]
    for turn in first:
        assert await until_finished(pool, turn["turn_id"]) == "succeeded"
    [server] = _servers_of(worker)  # three slots, one server process
    # One handle for both calls: the worker may reap the server between them, and a
    # second psutil.Process(server) would then raise NoSuchProcess.
    victim = psutil.Process(server)
    victim.kill()
    victim.wait(timeout=10)

    async def restarted() -> list[int] | None:
        now = _servers_of(worker)
        return now if now and server not in now else None

    [again] = await wait_until(restarted, what="the MCP server started again", within=30)
    later = enqueue(cluster, "Please remember again.")
    assert await until_finished(pool, later["turn_id"]) == "succeeded"
    assert _servers_of(worker) == [again]
    assert len(read_effects(effects)) == 4
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert not psutil.pid_exists(again) or psutil.Process(again).status() == psutil.STATUS_ZOMBIE


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def _remote(tmp_path: Path, env: dict[str, str]) -> AsyncIterator[tuple[FaultProxy, Path]]:
    """The test MCP server over streamable HTTP behind a fault proxy; the servers file."""
    port = _free_port()
    remote = subprocess.Popen(
        [*SERVER, "--http", str(port)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    proxy = FaultProxy("127.0.0.1", port)
    try:
        listen = await proxy.start()
        headers = tmp_path / "headers.json"
        headers.write_text(json.dumps({"Authorization": "Bearer mcp-secret-7f3a"}))
        servers = _servers_file(
            tmp_path,
            {
                "name": "notes",
                "url": f"http://127.0.0.1:{listen}/mcp",
                "headers_file": str(headers),
                "timeout": 20,
            },
        )
        yield proxy, servers
    finally:
        await proxy.stop()
        remote.terminate()
        remote.wait(timeout=10)


async def test_a_remote_server_that_drops_the_connection_mid_call_is_surfaced_not_doubled(
    cluster: Cluster, pool: Pool, notes_fake: FakeProvider, tmp_path: Path
) -> None:
    effects, gate = tmp_path / "notes.jsonl", tmp_path / "gate"
    async with _remote(tmp_path, {EFFECTS_ENV: str(effects), "MCP_GATE": str(gate)}) as (
        proxy,
        servers,
    ):
        worker = _worker(cluster, notes_fake, servers)
        turn = enqueue(cluster, "Please remember to buy milk.")

        async def held() -> list[dict[str, Any]] | None:
            return read_effects(effects) or None

        await wait_until(held, what="the call reached the remote server", within=60)
        proxy.set_mode("reset")  # the connection drops while the call is held
        assert await until_finished(pool, turn["turn_id"]) == "failed", worker.log_text()
        gate.touch()
        proxy.set_mode("pass")
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    _, _, _, error = await turn_row(pool, turn["turn_id"])
    assert error is not None and "cut off" in error
    unknown = await payloads(pool, turn["session_id"], "effect.unknown")
    assert [u["step_key"] for u in unknown] == [f"{turn['turn_id']}:tool:0.0"]
    assert len(read_effects(effects)) == 1  # surfaced, never doubled
    assert "mcp-secret-7f3a" not in worker.log_text()


async def test_a_read_only_remote_call_cut_off_mid_call_is_retried_in_its_step(
    cluster: Cluster, pool: Pool, notes_fake: FakeProvider, tmp_path: Path
) -> None:
    effects, gate, calls = tmp_path / "notes.jsonl", tmp_path / "gate", tmp_path / "calls"
    env = {EFFECTS_ENV: str(effects), "MCP_GATE": str(gate), "MCP_CALLS": str(calls)}
    async with _remote(tmp_path, env) as (proxy, servers):
        worker = _worker(cluster, notes_fake, servers)
        turn = enqueue(cluster, "How many notes? count them")

        async def reached() -> bool:
            return calls.exists()

        await wait_until(reached, what="the call reached the remote server", within=60)
        proxy.set_mode("reset")  # the connection drops while the call is held
        proxy.set_mode("pass")
        gate.touch()
        assert await until_finished(pool, turn["turn_id"]) == "succeeded", worker.log_text()
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    _, _, output, _ = await turn_row(pool, turn["turn_id"])
    assert output["reply"] == "0 notes"
    assert calls.read_text().splitlines() == ["count_notes", "count_notes"]  # run again
    sid = turn["session_id"]
    assert len(await payloads(pool, sid, "tool.returned")) == 1  # one step, committed once
    assert await payloads(pool, sid, "effect.unknown") == []


@pytest.mark.parametrize(
    "harness", ["tests.adapters.sdk_app:harness", "tests.adapters.pydantic_app:harness"]
)
async def test_the_adapters_call_mcp_tools_as_durable_steps(
    cluster: Cluster, pool: Pool, notes_fake: FakeProvider, tmp_path: Path, harness: str
) -> None:
    effects = tmp_path / "notes.jsonl"
    servers = _stdio(tmp_path, effects)
    victim = _worker(
        cluster, notes_fake, servers, harness=harness, failpoints="after_tool_step:kill"
    )
    turn = enqueue(cluster, "Please remember to buy milk.")
    assert victim.wait() == -signal.SIGKILL, victim.log_text()
    assert len(read_effects(effects)) == 1
    rescuer = _worker(cluster, notes_fake, servers, harness=harness)
    assert await until_finished(pool, turn["turn_id"]) == "succeeded", rescuer.log_text()
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait() == 0
    _, attempts, output, _ = await turn_row(pool, turn["turn_id"])
    assert (attempts, output["reply"]) == (2, "Done: noted: buy milk")
    assert [c["name"] for c in output["tool_calls"]] == ["append_note"]
    assert len(read_effects(effects)) == 1
    await assert_checks(pool, cluster, faults={UUID(turn["session_id"]): 1})


async def test_stint_status_lists_the_configured_servers_and_refuses_a_bad_file(
    cluster: Cluster, tmp_path: Path
) -> None:
    headers = tmp_path / "headers.json"
    headers.write_text(json.dumps({"Authorization": "Bearer mcp-secret-7f3a"}))
    servers = _servers_file(
        tmp_path,
        {"name": "notes", "command": SERVER[0], "args": SERVER[1:], "env": {"K": "env-secret"}},
        {"name": "search", "url": "http://127.0.0.1:9/mcp", "headers_file": str(headers)},
    )
    shown = cluster.stint("status", "--json", STINT_MCP_SERVERS=str(servers))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["mcp_servers"] == [
        {"name": "notes", "transport": "stdio", "where": " ".join(SERVER)},
        {"name": "search", "transport": "http", "where": "http://127.0.0.1:9/mcp"},
    ]
    text = cluster.stint("status", STINT_MCP_SERVERS=str(servers)).stdout
    assert "mcp servers: 2" in text and "search  http" in text
    assert "secret" not in shown.stdout + text
    bad = _servers_file(tmp_path, {"name": "both", "command": "x", "url": "http://h/mcp"})
    refused = cluster.stint("status", STINT_MCP_SERVERS=str(bad))
    assert refused.returncode == 2
    assert "give either command (stdio) or url" in refused.stderr


async def test_an_mcp_tool_the_file_marks_for_approval_parks_until_answered(
    cluster: Cluster, pool: Pool, notes_fake: FakeProvider, tmp_path: Path
) -> None:
    effects = tmp_path / "notes.jsonl"
    servers = _stdio(tmp_path, effects, needs_approval=["append_note"])
    worker = _worker(cluster, notes_fake, servers, slots=1)
    asked = enqueue(cluster, "Please remember to buy milk.")
    sid = asked["session_id"]

    async def parked() -> list[dict[str, Any]]:
        return await payloads(pool, sid, "approval.requested")

    [request] = await wait_until(parked, what="the MCP call waits for approval")
    assert request["question"] == {"tool": "append_note", "arguments": {"text": "buy milk"}}
    assert read_effects(effects) == []
    answered = cluster.stint("answer", sid, request["step_key"], '"yes"')
    assert answered.returncode == 0, answered.stderr
    assert await until_finished(pool, asked["turn_id"]) == "succeeded", worker.log_text()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert len(read_effects(effects)) == 1
    await assert_checks(pool, cluster, faults={UUID(sid): 1})


async def test_a_stdio_server_sees_none_of_the_workers_environment(
    cluster: Cluster, pool: Pool, notes_fake: FakeProvider, tmp_path: Path
) -> None:
    worker = _worker(cluster, notes_fake, _stdio(tmp_path, tmp_path / "notes.jsonl"))
    turn = enqueue(cluster, "Does it leak?")
    assert await until_finished(pool, turn["turn_id"]) == "succeeded", worker.log_text()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    _, _, output, _ = await turn_row(pool, turn["turn_id"])
    # The database URL and the model key stay in the worker; the file's env arrives.
    assert (
        output["reply"] == "STINT_DATABASE_URL: no; STINT_MODEL_API_KEY: no; ADAPTER_EFFECTS: yes"
    )
