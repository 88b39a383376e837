"""Worker health: the state's verdicts, and the HTTP endpoints on a real socket."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from stint.worker.health import HealthServerError, HealthState, main, probe, serve_health
from tests.polling import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _request(port: int, head: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    header_block, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = header_block.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return int(status_line.split(" ")[1]), headers, body


async def _get(port: int, path: str) -> tuple[int, Any]:
    status, _, body = await _request(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return status, json.loads(body)


def test_liveness_needs_a_prompt_loop_not_the_database() -> None:
    """An outage must not fail every worker's liveness probe at once (and have
    them all restarted): the renewal age is shown, only the loop is judged."""
    clock = Clock()
    state = HealthState(lease_seconds=30, clock=clock)
    assert state.max_loop_lag == 10  # a third of the lease: one renewal period
    assert state.liveness()[0]
    clock.now += 300.0
    state.renewal_failed()
    ok, figures = state.liveness()
    assert ok and figures["renewal_age_s"] == pytest.approx(300.0)
    state.loop_lag = 10.0
    assert not state.liveness()[0]


async def test_readiness_asks_the_database_at_most_every_half_second() -> None:
    clock = Clock()
    answers: list[str | None] = ["connection refused", None]
    asked: list[float] = []

    async def probe() -> str | None:
        asked.append(clock.now)
        return answers[len(asked) - 1]

    state = HealthState(lease_seconds=30, clock=clock, probe=probe)
    state.serving = True
    await state.probe_database()
    assert state.readiness() == (
        False,
        {
            "serving": True,
            "draining": False,
            "database_ok": False,
            "database_detail": "connection refused",
        },
    )
    clock.now += 0.4
    await state.probe_database()  # too soon: the last answer stands
    assert len(asked) == 1
    clock.now += 0.2
    await state.probe_database()
    assert state.readiness() == (
        True,
        {"serving": True, "draining": False, "database_ok": True},
    )
    assert asked == [100.0, pytest.approx(100.6)]


def test_readiness_needs_a_registered_worker_the_database_and_no_drain() -> None:
    state = HealthState(lease_seconds=30, clock=Clock())
    state.renewed()
    assert state.readiness() == (
        False,
        {"serving": False, "draining": False, "database_ok": True},
    )
    state.serving = True
    assert state.readiness()[0]
    state.renewal_failed()
    assert state.readiness() == (
        False,
        {"serving": True, "draining": False, "database_ok": False},
    )
    state.renewed()
    state.draining = True
    assert state.readiness() == (False, {"serving": True, "draining": True, "database_ok": True})


async def test_endpoints_answer_with_their_verdicts() -> None:
    state = HealthState(lease_seconds=30)
    port = _free_port()
    async with serve_health(port, state):
        status, body = await _get(port, "/livez")
        assert status == 200 and body["status"] == "ok" and body["lease_s"] == 30
        assert await _get(port, "/readyz?verbose=1") == (
            503,
            {"status": "failing", "serving": False, "draining": False, "database_ok": None},
        )
        state.serving = True
        state.renewed()
        assert (await _get(port, "/readyz"))[0] == 200
        state.draining = True
        assert (await _get(port, "/readyz"))[1]["draining"] is True
        assert (await _get(port, "/nope"))[0] == 404

        status, headers, body = await _request(port, b"HEAD /livez HTTP/1.1\r\n\r\n")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
        status, _, _ = await _request(port, b"POST /livez HTTP/1.1\r\n\r\n")
        assert status == 405
        status, _, _ = await _request(port, b"nonsense\r\n\r\n")
        assert status == 404
        # A client that hangs up before its request ends gets no answer, and harms nothing.
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /livez HTT")
        writer.close()
        await writer.wait_closed()
        assert (await _get(port, "/livez"))[0] == 200

        assert await asyncio.to_thread(probe, port, "livez")
        assert not await asyncio.to_thread(probe, port, "readyz")  # draining
    with pytest.raises(ConnectionRefusedError):
        await _get(port, "/livez")


async def test_loop_lag_is_sampled_while_serving() -> None:
    state = HealthState(lease_seconds=30)
    state.loop_lag = -1.0  # a value the watcher never writes

    async def sampled() -> bool:
        return state.loop_lag >= 0

    async with serve_health(_free_port(), state):
        await wait_until(sampled, what="a loop-lag sample")


async def test_a_taken_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(HealthServerError, match=f"cannot serve health on port {port}"):
            async with serve_health(port, HealthState(lease_seconds=30)):
                pass


async def test_port_zero_serves_nothing() -> None:
    async with serve_health(0, HealthState(lease_seconds=30)):
        pass


def test_probe_command_says_when_the_endpoint_is_off(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STINT_HEALTH_PORT", "0")
    assert main(["livez"]) == 1
    assert "off" in capsys.readouterr().err
    assert main(["readyz", "--port", str(_free_port())]) == 1
    assert "no answer" in capsys.readouterr().err


async def test_port_zero_with_a_port_file_serves_on_loopback_and_writes_the_port(
    tmp_path: Path,
) -> None:
    path = tmp_path / "health.port"
    async with serve_health(0, HealthState(lease_seconds=30), port_file=path):
        port = int(path.read_text())
        assert await asyncio.to_thread(probe, port, "livez")
    assert not path.exists()


def test_probe_command_reads_the_port_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("STINT_HEALTH_PORT", "0")
    monkeypatch.setenv("STINT_HEALTH_PORT_FILE", str(tmp_path / "none.port"))
    assert main(["livez"]) == 1
    assert "no health port" in capsys.readouterr().err
    (tmp_path / "dead.port").write_text(f"{_free_port()}\n")
    assert main(["livez", "--port-file", str(tmp_path / "dead.port")]) == 1
    assert "no answer" in capsys.readouterr().err
