"""The lean HTTP/1.1 transport against real loopback sockets (no database).

Each test scripts the server's raw answers (``tests.agents.raw_http``) and drives
the transport through httpx's client, the way the SDK does; the server's record
of connections and requests is what is asserted.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from stint.agents.http11 import Http11Transport
from tests.agents.raw_http import Answer, RawServer, ok, raw_server
from tests.polling import wait_until


def _client(**transport: float) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=Http11Transport(**transport))  # type: ignore[arg-type]


async def _post(server: RawServer, client: httpx2.AsyncClient, payload: object) -> httpx2.Response:
    return await client.post(f"{server.url}/v1/chat/completions", json=payload)


async def test_keep_alive_sends_every_request_on_one_connection() -> None:
    numbered = _client()
    async with raw_server(lambda c, i: Answer(ok(b'{"n": %d}' % i))) as server, numbered as client:
        answers = [await _post(server, client, {"ask": n}) for n in range(3)]
    assert [a.json() for a in answers] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert server.connections == 1
    assert [json.loads(s.body) for s in server.seen] == [{"ask": 0}, {"ask": 1}, {"ask": 2}]
    assert server.seen[0].head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nhost: 127.0.0.1:" in server.seen[0].head.lower()


async def test_a_chunked_answer_is_decoded_extensions_and_trailers_included() -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-trailer: 1\r\n\r\n"
    )
    async with raw_server(lambda c, i: Answer(raw)) as server, _client() as client:
        first = await _post(server, client, {})
        second = await _post(server, client, {})
    assert first.content == second.content == b"hello world"
    assert server.connections == 1


async def test_a_body_framed_by_the_close_is_read_and_its_connection_not_reused() -> None:
    raw = b"HTTP/1.1 200 OK\r\n\r\nuntil the end"
    async with raw_server(lambda c, i: Answer(raw, close=True)) as server, _client() as client:
        answers = [await _post(server, client, {}) for _ in range(2)]
    assert [a.content for a in answers] == [b"until the end"] * 2
    assert server.connections == 2


async def test_connection_close_and_http_1_0_are_not_reused() -> None:
    answers = [
        ok(extra=b"connection: close\r\n"),
        b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n{}",
        ok(),
        ok(),
    ]
    # The server keeps every connection open: the client is the one that must not reuse them.
    async with raw_server(lambda c, i: Answer(answers[c - 1])) as server, _client() as client:
        for _ in range(4):
            assert (await _post(server, client, {})).json() == {}
    assert server.connections == 3
    assert [(s.connection, s.index) for s in server.seen] == [(1, 0), (2, 0), (3, 0), (3, 1)]


async def test_an_interim_100_answer_is_skipped() -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b'{"done": true}')
    async with raw_server(lambda c, i: Answer(raw)) as server, _client() as client:
        answer = await _post(server, client, {})
    assert answer.status_code == 200 and answer.json() == {"done": True}


async def test_a_reused_connection_closed_before_answering_is_not_sent_again() -> None:
    # The server may have read the request before it closed: the transport does not
    # send it again (the durable step retries, inside the quota gate's reservation).
    def answer(connection: int, index: int) -> Answer:
        return Answer(None if (connection, index) == (1, 1) else ok(b'{"c": %d}' % connection))

    async with raw_server(answer) as server, _client() as client:
        first = await _post(server, client, {"n": 1})
        with pytest.raises(httpx2.RemoteProtocolError, match="without answering"):
            await _post(server, client, {"n": 2})
        third = await _post(server, client, {"n": 3})
    assert (first.json(), third.json()) == ({"c": 1}, {"c": 2})
    assert [(s.connection, s.index, json.loads(s.body)) for s in server.seen] == [
        (1, 0, {"n": 1}),
        (1, 1, {"n": 2}),
        (2, 0, {"n": 3}),
    ]


async def test_a_new_connection_closed_before_answering_fails() -> None:
    async with raw_server(lambda c, i: Answer(None)) as server, _client() as client:
        with pytest.raises(httpx2.RemoteProtocolError, match="without answering"):
            await _post(server, client, {})
    assert len(server.seen) == 1


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    # Closed without saying so: once the event loop has seen the close, the pool
    # does not offer the connection again, and the next request opens a new one
    # (idle connections never expire here: only the close can take this one out).
    transport = Http11Transport(idle_seconds=3600)
    client = httpx2.AsyncClient(transport=transport)

    async def seen_closed() -> bool:
        return transport.reusable_connections == 0

    async with raw_server(lambda c, i: Answer(ok(), close=True)) as server, client:
        for _ in range(3):
            assert (await _post(server, client, {})).status_code == 200
            await wait_until(seen_closed, what="the pool saw the server's close", within=10)
    assert server.connections == 3
    assert [s.index for s in server.seen] == [0, 0, 0]


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-le",
    ],
    ids=["length", "chunked", "head"],
)
async def test_an_answer_cut_short_is_a_protocol_error(raw: bytes) -> None:
    async with raw_server(lambda c, i: Answer(raw, close=True)) as server, _client() as client:
        with pytest.raises(httpx2.RemoteProtocolError, match="closed the connection"):
            await _post(server, client, {})


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"SPDY/3 200 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed response header"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
    ],
    ids=["status", "header", "length", "chunk"],
)
async def test_a_malformed_answer_is_a_protocol_error(raw: bytes, match: str) -> None:
    async with raw_server(lambda c, i: Answer(raw, close=True)) as server, _client() as client:
        with pytest.raises(httpx2.RemoteProtocolError, match=match):
            await _post(server, client, {})


async def test_a_silent_server_is_a_read_timeout() -> None:
    async with raw_server(lambda c, i: Answer(None, hang=True)) as server, _client() as client:
        with pytest.raises(httpx2.ReadTimeout):
            await client.post(f"{server.url}/x", json={}, timeout=httpx2.Timeout(5, read=0.2))


async def test_nothing_listening_is_a_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with _client() as client:
        with pytest.raises(httpx2.ConnectError, match=f"127.0.0.1:{port}"):
            await client.get(f"http://127.0.0.1:{port}/")


async def test_a_body_of_unknown_length_goes_out_chunked() -> None:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b"one ", b"", b"two"):
            yield part

    async with raw_server(lambda c, i: Answer(ok())) as server, _client() as client:
        await client.post(f"{server.url}/x", content=parts())
    [seen] = server.seen
    assert b"transfer-encoding: chunked" in seen.head.lower() and seen.body == b"one two"


async def test_a_body_read_in_two_iterations_is_whole_and_its_connection_reused() -> None:
    # The SDK reads a stream up to its [DONE] event through aiter_bytes(), then drains
    # the rest by iterating response.stream again: both continue one reader.
    raw = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b"e\r\ndata: [DONE]\n\n\r\n6\r\n: tail\r\n0\r\n\r\n"
    )
    async with raw_server(lambda c, i: Answer(raw)) as server, _client() as client:
        for _ in range(3):
            async with client.stream("POST", f"{server.url}/x", json={}) as answer:
                async for first in answer.aiter_bytes():
                    assert first == b"data: [DONE]\n\n"
                    break
                assert isinstance(answer.stream, httpx2.AsyncByteStream)
                rest = [piece async for piece in answer.stream]
                assert rest == [b": tail"]
    assert server.connections == 1


async def test_an_answer_left_unread_closes_its_connection() -> None:
    big = Answer(ok(b"x" * 10_000))
    async with raw_server(lambda c, i: big) as server, _client() as client:
        async with client.stream("POST", f"{server.url}/x", json={}) as answer:
            assert answer.status_code == 200  # the body is never read
        assert (await _post(server, client, {})).content == b"x" * 10_000
    assert server.connections == 2


async def test_an_idle_connection_past_its_expiry_is_not_reused() -> None:
    fresh = _client(idle_seconds=0.0)
    async with raw_server(lambda c, i: Answer(ok())) as server, fresh as client:
        for _ in range(2):
            await _post(server, client, {})
    assert server.connections == 2


async def test_expired_connections_leave_the_pool_at_the_next_hand_back() -> None:
    # Two requests at once open two connections; with no idle time allowed, the second
    # hand-back closes the first: the pool never keeps what it would not reuse.
    transport = Http11Transport(idle_seconds=0.0)
    client = httpx2.AsyncClient(transport=transport)
    async with raw_server(lambda c, i: Answer(ok())) as server, client:
        await asyncio.gather(_post(server, client, {}), _post(server, client, {}))
        assert server.connections == 2 and transport.idle_connections == 1


async def test_a_chunk_larger_than_a_read_arrives_whole() -> None:
    body = bytes(range(256)) * 1024  # 256 KiB in one chunk
    raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        len(body),
        body,
    )
    async with raw_server(lambda c, i: Answer(raw)) as server, _client() as client:
        answers = [await _post(server, client, {}) for _ in range(2)]
    assert [a.content for a in answers] == [body, body] and server.connections == 1


def _certificates(directory: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA's certificate file and a server context whose certificate it signed."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, leaf_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stint test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(2)
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "leaf.pem").write_bytes(leaf.public_bytes(pem))
    (directory / "leaf.key").write_bytes(
        leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(directory / "leaf.pem", directory / "leaf.key")
    return directory / "ca.pem", server


async def test_tls_trusts_what_ssl_cert_file_names_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, server_tls = _certificates(tmp_path)
    async with raw_server(lambda c, i: Answer(ok(b'{"tls": true}')), tls=server_tls) as server:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        async with _client() as client:
            with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await _post(server, client, {})
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        async with _client() as client:
            answers = [await _post(server, client, {}) for _ in range(2)]
    assert [a.json() for a in answers] == [{"tls": True}] * 2
    assert server.connections == 1  # kept alive (a refused handshake never reaches the handler)


async def test_a_closed_transport_refuses_requests() -> None:
    transport = Http11Transport()
    await transport.aclose()
    async with httpx2.AsyncClient(transport=transport) as client:
        with pytest.raises(RuntimeError, match="closed"):
            await client.get("http://127.0.0.1:9/")


async def test_another_scheme_is_refused_without_repeating_the_url() -> None:
    async with _client() as client:
        with pytest.raises(httpx2.UnsupportedProtocol) as refused:
            await client.get("ftp://user:hunter2@127.0.0.1:9/file")
    assert "'ftp'" in str(refused.value) and "hunter2" not in str(refused.value)
