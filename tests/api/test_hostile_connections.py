"""Acceptance: ``stint api`` under careless and hostile clients, with no proxy in
front (issue 22, findings 2 and 3): authentication before any work, a cap on
request heads, a deadline for them, a request limit with a clear 503, and
idle sockets that cannot lock real clients out. Real API processes, raw
sockets where a client must misbehave."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio

from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from tests.api.conftest import ApiServer, Keys, api_env, bearer, free_port, row_counts, start_api
from tests.polling import wait_until

_HEAD_SECONDS = 1.0


async def _raw(port: int, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one response (read to the connection's end when
    it has no length); a hang fails the test by its timeout."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=60)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    if length is not None:
        body = await asyncio.wait_for(reader.readexactly(int(length)), timeout=60)
    else:
        body = await asyncio.wait_for(reader.read(), timeout=60)
    return int(status_line.split(" ", 2)[1]), headers, body


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    """Every byte the server sent before it closed the connection (a hang fails by the
    timeout). Started before the server answers: a read already waiting returns the
    bytes even when a reset arrives right behind them (a client that writes after the
    server closed gets one), where a read started after the reset would raise it."""
    received = bytearray()
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), timeout=60)
        except ConnectionResetError:
            return bytes(received)
        if not chunk:
            return bytes(received)
        received += chunk


async def _closed(reader: asyncio.StreamReader) -> bool:
    """True once the server closed the connection (a hang fails by the timeout)."""
    try:
        return await asyncio.wait_for(reader.read(65536), timeout=60) == b""
    except ConnectionResetError:
        return True


@pytest_asyncio.fixture(loop_scope="session")
async def strict_api(db: ScratchTarget, tmp_path: Path) -> AsyncIterator[ApiServer]:
    """An API with small limits, so each is reached by a few sockets."""
    server = await start_api(
        db,
        tmp_path / "api.log",
        STINT_API_MAX_HEADER_BYTES="8192",
        STINT_API_HEADER_SECONDS=str(_HEAD_SECONDS),
        STINT_API_MAX_REQUESTS="1",
    )
    try:
        yield server
    finally:
        server.stop()


async def test_unauthenticated_requests_get_401_before_any_body_rule(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool
) -> None:
    """Finding 3: the key is checked from the headers alone, before the body is read,
    judged or parsed; so no body rule answers first, and a body never sent is not
    waited for."""
    before = await row_counts(pool)
    cases: list[tuple[str, dict[str, str], bytes]] = [
        ("/v1/sessions", {"Content-Type": "application/json"}, b"{not json"),
        ("/v1/sessions", {"Content-Type": "text/plain"}, b"hello"),
        ("/v1/sessions", {"Content-Type": "application/json"}, b"[" * 100_000),
        ("/v1/sessions", {"Content-Type": "application/json"}, b'{"tenant": 1e400}'),
        ("/v1/sessions/not-a-uuid/turns", {"Content-Type": "application/json"}, b"{}"),
    ]
    for path, headers, body in cases:
        for auth in ({}, bearer("stk_nonsense"), bearer(keys.revoked)):
            got = await http.post(path, content=body, headers={**headers, **auth})
            assert got.status_code == 401, (path, body[:20], got.text)
            assert got.headers["content-type"] == "application/problem+json"
            assert got.headers["www-authenticate"] == "Bearer"
    bad_query = await http.get("/v1/sessions?limit=-5")
    assert bad_query.status_code == 401, bad_query.text
    # Bodies announced but never sent: answered from the head, not waited for (1 MB)
    # nor judged by their size (100 MB).
    for length in (1_000_000, 100_000_000):
        reader, writer = await _raw(
            api.port,
            b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {length}\r\n\r\n{{".encode(),
        )
        try:
            status, _, body = await _answer(reader)
        finally:
            writer.close()
        assert status == 401, (length, body)
    assert await row_counts(pool) == before


async def test_a_request_head_over_the_cap_is_431_and_closed(strict_api: ApiServer) -> None:
    """Finding 2: an unfinished 8 MB head held memory indefinitely; now past
    STINT_API_MAX_HEADER_BYTES the connection gets 431 and is closed."""
    reader, writer = await _raw(
        strict_api.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Fill: " + b"a" * 9000
    )
    try:
        status, _, body = await _answer(reader)
    finally:
        writer.close()
    assert status == 431, body
    assert "8192" in json.loads(body)["detail"]


async def test_silent_and_slow_sockets_are_closed_at_the_head_deadline(
    strict_api: ApiServer,
) -> None:
    """Finding 2: a socket that sends nothing was never closed, and a slowloris
    head never timed out. Now: closed silently, and 408 then closed."""
    silent_reader, silent = await _raw(strict_api.port, b"")
    slow_reader, slow = await _raw(strict_api.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")

    async def dribble() -> None:
        while not slow.is_closing() and not slow_reader.at_eof():
            slow.write(b"X-A: b\r\n")
            try:
                await slow.drain()
            except ConnectionError:
                return
            await asyncio.sleep(_HEAD_SECONDS / 5)

    dribbling = asyncio.create_task(dribble())
    slow_answer = asyncio.create_task(_until_closed(slow_reader))
    try:
        assert await _closed(silent_reader)
        # The answer, then the close: _until_closed returns only once the server closed.
        answer = await slow_answer
        assert answer.startswith(b"HTTP/1.1 408 "), answer
    finally:
        slow_answer.cancel()
        dribbling.cancel()
        silent.close()
        slow.close()


async def test_past_the_request_limit_a_request_gets_503(
    strict_api: ApiServer, keys: Keys, pool: Pool
) -> None:
    """A request limit with a clear 503: with STINT_API_MAX_REQUESTS=1, one request
    held open (its body still coming) makes the next one a problem+json 503 with
    Retry-After; once it ends, requests are served again."""
    reader, writer = await _raw(
        strict_api.port,
        b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {keys.a}\r\nContent-Length: 2\r\n\r\n{{".encode(),
    )
    async with httpx.AsyncClient(base_url=strict_api.base_url, timeout=30) as client:

        async def refused() -> httpx.Response | None:
            got = await client.get("/v1/sessions", headers=bearer(keys.a))
            return got if got.status_code == 503 else None

        got = await wait_until(refused, what="a second request refused with 503")
        assert got.headers["content-type"] == "application/problem+json"
        assert int(got.headers["retry-after"]) >= 1
        assert "limit" in got.json()["detail"]
        assert (await client.get("/healthz")).status_code == 200  # probes are never refused
        writer.write(b"}")
        await writer.drain()
        status, _, body = await _answer(reader)
        writer.close()
        assert status == 201, body
        assert (await client.get("/v1/sessions", headers=bearer(keys.a))).status_code == 200


def _api_with_few_descriptors(db: ScratchTarget, log: Path, port: int) -> subprocess.Popen[bytes]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    env = {**api_env(db), "STINT_API_HEADER_SECONDS": "600"}
    with log.open("ab") as out:  # the child has its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "stint.ops.cli", "api", "--port", str(port)],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=limit,
        )


async def test_idle_sockets_cannot_lock_real_clients_out(db: ScratchTarget, tmp_path: Path) -> None:
    """Finding 2: idle sockets past the descriptor limit locked every real client
    out. With 128 descriptors (the connection cap becomes 64) and 150 sockets that
    never send a byte (and a head deadline of 10 minutes), a real client is served:
    the oldest idle sockets are closed to make room."""
    port = free_port()
    proc = _api_with_few_descriptors(db, tmp_path / "api.log", port)
    idle: list[socket.socket] = []
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:

            async def answers() -> bool:
                assert proc.poll() is None, (tmp_path / "api.log").read_text()
                try:
                    return (await client.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_until(answers, what="the API answers /healthz")
        for _ in range(150):
            idle.append(socket.create_connection(("127.0.0.1", port)))
        # A fresh client (a new connection) after every idle socket was opened.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            got = await client.get("/healthz")
        assert got.status_code == 200
        closed = 0
        for sock in idle:
            sock.settimeout(0)
            try:
                closed += sock.recv(1) == b""
            except BlockingIOError:
                pass
            except ConnectionResetError:
                closed += 1
        assert closed >= 150 - 64
    finally:
        for sock in idle:
            sock.close()
        proc.terminate()
        proc.wait(timeout=30)
