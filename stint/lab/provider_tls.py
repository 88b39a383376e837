"""What a model call costs the worker against a provider over TLS, one call after
another on the agents harness's own client (``stint.agents.provider.ChatProvider``).

The fake provider the benchmarks use speaks plain HTTP on loopback, where a new
connection is nearly free; a real provider is HTTPS, where each new connection
is a TLS handshake. This serves a streamed chat answer over TLS from another
process (a certificate made here, trusted through ``SSL_CERT_FILE``) and times
``--calls`` sequential calls: the client's CPU and wall time a call, and how
many connections the server accepted (1 when the connection is reused).

``python -m stint.lab.provider_tls [--calls N]`` prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import ipaddress
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stint.lab.free_port import free_port

__all__ = ["main"]

_EVENTS = (
    b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n',
    b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n',
    b"data: [DONE]\n\n",
)
_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in _EVENTS)
    + b"0\r\n\r\n"
)


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def _serve(port: int, cert: Path, key: Path) -> None:
    """Answer every request with the streamed answer; print the connection count
    on each accept (the parent reads the last line)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    accepted = 0

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        print(accepted, flush=True)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.partition(b":")[2])
                await reader.readexactly(length)
                writer.write(_ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", port, ssl=context)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


async def _calls(port: int, calls: int) -> dict[str, Any]:
    from pydantic import SecretStr

    from stint.agents.config import ModelConfig
    from stint.agents.provider import ChatProvider, Retry

    provider = ChatProvider(ModelConfig(f"https://127.0.0.1:{port}", "m", SecretStr("k")))

    async def on_retry(retry: Retry) -> None:
        raise RuntimeError(f"a call failed: {retry.reason}")

    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    try:
        await provider.complete(request, on_delta=lambda text: None, on_retry=on_retry)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(calls):
            await provider.complete(request, on_delta=lambda text: None, on_retry=on_retry)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await provider.close()
    return {
        "calls": calls,
        "client_cpu_ms_per_call": round(1000 * cpu / calls, 3),
        "wall_ms_per_call": round(1000 * wall / calls, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stint.lab.provider_tls",
        description="Time sequential model calls of the agents harness's client against a "
        "streamed chat answer served over TLS from another process; print one JSON line.",
    )
    parser.add_argument("--calls", type=int, default=1000, help="calls timed (default 1000)")
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "CERT", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        port, cert, key = args.serve
        asyncio.run(_serve(int(port), Path(cert), Path(key)))
        return 0
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    with tempfile.TemporaryDirectory(prefix="stint-tls-") as folder:
        cert, key = _certificate(Path(folder))
        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stint.lab.provider_tls",
                "--serve",
                str(port),
                str(cert),
                str(key),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            if server.stdout.readline().strip() != "ready":
                raise RuntimeError("the TLS server did not start")
            previous = os.environ.get("SSL_CERT_FILE")
            os.environ["SSL_CERT_FILE"] = str(cert)  # read as the client is made
            try:
                figures = asyncio.run(_calls(port, args.calls))
            finally:
                if previous is None:
                    del os.environ["SSL_CERT_FILE"]
                else:
                    os.environ["SSL_CERT_FILE"] = previous
        finally:
            server.terminate()
            output, _ = server.communicate(timeout=30)
        counts = [line for line in output.split() if line.isdigit()]
        figures["connections"] = int(counts[-1]) if counts else 0
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
