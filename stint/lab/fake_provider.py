"""A fake OpenAI-compatible chat-completions server, for tests, the demo and the load test.

Real HTTP/1.1 on loopback (asyncio streams, keep-alive, chunked SSE), so the
real ``openai`` client runs against it unchanged. Answers come from a
``FakeScript``; faults are queued and each one is spent on the next request:
429 bursts with ``retry-after`` / ``retry-after-ms``, 5xx, a refusal (4xx)
whose message may echo the request's Authorization header (to prove a key is
scrubbed), a connection dropped mid-stream, a slow first token. Every request
is logged with when it arrived, the API key it came with and what was
answered (the usage it reported), so a test can assert from the server's own
record which model calls happened, and how many per key in any window.

In a test: ``with FakeProvider(script).running() as url:`` (its own thread and
event loop). Standalone: ``python -m stint.lab.fake_provider --port 8089``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stint.lab.fake_script import DEMO_SCRIPT, FakePlan, FakeScript

__all__ = ["FakeProvider", "Fault", "RequestRecord", "busiest_window", "main"]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class Fault:
    """What the next request gets instead of a plain answer."""

    kind: str  # "status" | "drop" | "slow"
    status: int = 200
    message: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    after_chunks: int = 0
    delay: float = 0.0


@dataclass
class RequestRecord:
    """One request as the fake saw it and what it answered."""

    n: int
    at: float  # time.monotonic() in the fake's process
    path: str
    model: str | None
    stream: bool
    user: str
    round: int
    messages: list[dict[str, Any]]
    tools: list[str]
    outcome: str  # "ok" | "status:<code>" | "dropped"
    usage: dict[str, int] = field(default_factory=dict)
    api_key: str = ""  # the bearer token it came with (a fake's log, for quota tests)

    @property
    def tokens(self) -> int:
        """The tokens this request cost as the fake reported them (0 when refused)."""
        return self.usage.get("prompt_tokens", 0) + self.usage.get("completion_tokens", 0)


class FakeProvider:
    """See the module doc. Thread-safe: faults and the log may be used from any thread."""

    def __init__(
        self,
        script: FakeScript = DEMO_SCRIPT,
        *,
        latency_ms: int = 0,
        token_delay_ms: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.script = script
        self.latency = latency_ms / 1000
        self.token_delay = token_delay_ms / 1000
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._faults: deque[Fault] = deque()
        self._log: list[RequestRecord] = []
        self._server: asyncio.Server | None = None
        # Open connections' handlers: stop() cancels and awaits them, or they would be
        # left pending when the loop closes (and fail later, on garbage collection).
        self._handlers: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # -- faults and the log --------------------------------------------------

    def rate_limit(
        self, times: int, *, retry_after_ms: int | None = None, retry_after: float | None = None
    ) -> None:
        """The next ``times`` requests get 429 with the given retry hint."""
        headers: list[tuple[str, str]] = []
        if retry_after_ms is not None:
            headers.append(("retry-after-ms", str(retry_after_ms)))
        if retry_after is not None:
            headers.append(("retry-after", f"{retry_after:g}"))
        self._queue(times, Fault("status", 429, "Rate limit reached", tuple(headers)))

    def server_error(self, times: int, *, status: int = 503) -> None:
        self._queue(times, Fault("status", status, "The server is overloaded"))

    def refuse(self, *, status: int = 400, message: str = "Invalid request") -> None:
        """The next request gets ``status``; ``{authorization}`` in the message echoes
        the request's Authorization header, as a careless server might."""
        self._queue(1, Fault("status", status, message))

    def drop_mid_stream(self, times: int = 1, *, after_chunks: int = 2) -> None:
        """The next ``times`` streams are cut (connection closed) after some chunks."""
        self._queue(times, Fault("drop", after_chunks=after_chunks))

    def slow_first_token(self, seconds: float, times: int = 1) -> None:
        self._queue(times, Fault("slow", delay=seconds))

    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._log)

    def counts(self) -> dict[str, dict[str, int]]:
        """Per API key: requests by outcome (ok, dropped, status) and the tokens it
        reported (the log's summary, cheap to fetch after a long run)."""
        found: dict[str, dict[str, int]] = {}
        for record in self.requests():
            tally = found.setdefault(record.api_key, {"ok": 0, "dropped": 0, "status": 0})
            outcome = record.outcome.split(":")[0]
            tally[outcome] += 1
            tally["tokens"] = tally.get("tokens", 0) + (record.tokens if outcome == "ok" else 0)
        return found

    def busiest(self, window: float) -> dict[str, dict[str, int]]:
        """Per API key: the most requests, and the most reported tokens, that
        arrived here in any ``window`` seconds (by arrival time: what a provider's
        own rate limiter would count)."""
        by_key: dict[str, list[RequestRecord]] = {}
        for record in self.requests():
            by_key.setdefault(record.api_key, []).append(record)
        return {key: busiest_window(records, window) for key, records in by_key.items()}

    def _queue(self, times: int, fault: Fault) -> None:
        with self._lock:
            self._faults.extend([fault] * times)

    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            record.n = len(self._log) + 1
            self._log.append(record)

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> str:
        """Serve in the running loop; returns the base URL (``.../v1``)."""
        self._server = await asyncio.start_server(self._connection, self._host, self._port)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}/v1"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for handler in list(self._handlers):
                handler.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            if self._handlers:
                await asyncio.wait(list(self._handlers), timeout=5)
            self._server = None

    @contextlib.contextmanager
    def running(self) -> Iterator[str]:
        """Serve from a thread of its own (its own event loop) while the block runs."""
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        thread = threading.Thread(target=serve, name="fake-provider", daemon=True)
        thread.start()
        if not ready.wait(30):
            raise RuntimeError("the fake provider did not start")
        try:
            yield self.url
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)

    # -- HTTP ------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ValueError, asyncio.CancelledError):
            pass
        finally:
            self._handlers.discard(handler)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request and its answer; False when the connection should close."""
        line = await reader.readline()
        if not line.strip():
            return False
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        if method == "GET" and path.rstrip("/").endswith("/_fake/counts"):
            await _send_json(writer, 200, self.counts())
            return True
        if method == "GET" and "/_fake/busiest" in path:
            window = float(path.partition("window=")[2] or 60)
            await _send_json(writer, 200, self.busiest(window))
            return True
        if method == "GET" and path.rstrip("/").endswith("/_fake/requests"):
            log = [asdict(r) for r in self.requests()]
            await _send_json(writer, 200, log)
            return True
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            await _send_json(writer, 404, _error(f"no route {method} {path}", "not_found"))
            return True
        try:
            request = json.loads(body)
            messages = list(request["messages"])
        except (ValueError, KeyError, TypeError):
            await _send_json(writer, 400, _error("body must be a JSON chat request", "invalid"))
            return True
        return await self._answer(writer, path, headers, request, messages)

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        path: str,
        headers: dict[str, str],
        request: dict[str, Any],
        messages: list[dict[str, Any]],
    ) -> bool:
        plan = self.script.plan(messages, call_prefix=f"call_{len(self.requests()) + 1}")
        fault = self._next_fault()
        stream = bool(request.get("stream"))
        record = RequestRecord(
            n=0,
            at=time.monotonic(),
            path=path,
            model=request.get("model"),
            stream=stream,
            user=plan.user,
            round=plan.round,
            messages=messages,
            tools=[t.get("function", {}).get("name", "") for t in request.get("tools") or []],
            outcome="ok",
            api_key=headers.get("authorization", "").removeprefix("Bearer "),
        )
        if fault is not None and fault.kind == "status":
            record.outcome = f"status:{fault.status}"
            self._record(record)
            message = fault.message.replace("{authorization}", headers.get("authorization", ""))
            kind = "rate_limit_error" if fault.status == 429 else "invalid_request_error"
            await _send_json(writer, fault.status, _error(message, kind), fault.headers)
            return True
        record.usage = plan.usage
        dropping = fault is not None and fault.kind == "drop"
        record.outcome = "dropped" if dropping else "ok"
        self._record(record)
        first_delay = self.latency + (
            fault.delay if fault is not None and fault.kind == "slow" else 0
        )
        if not stream:
            await asyncio.sleep(first_delay)
            await _send_json(writer, 200, _completion(plan, request))
            return True
        cut = fault.after_chunks if fault is not None and dropping else None
        return await self._stream(writer, plan, request, first_delay, cut)

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        plan: FakePlan,
        request: dict[str, Any],
        first_delay: float,
        cut: int | None,
    ) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
        )
        await writer.drain()
        await asyncio.sleep(first_delay)
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        for sent, chunk in enumerate(_chunks(plan, request, include_usage=include_usage)):
            if cut is not None and sent >= cut:
                writer.transport.abort()  # no terminating chunk: the client sees a cut stream
                return False
            if sent and self.token_delay:
                await asyncio.sleep(self.token_delay)
            data = f"data: {chunk}\n\n".encode()
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


async def _send_json(
    writer: asyncio.StreamWriter,
    status: int,
    value: Any,
    headers: tuple[tuple[str, str], ...] = (),
) -> None:
    body = json.dumps(value).encode()
    head = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: keep-alive",
    ]
    head += [f"{k}: {v}" for k, v in headers]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    await writer.drain()


def _base(request: dict[str, Any], plan: FakePlan) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-fake-{plan.round}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(request.get("model") or "fake"),
    }


def _usage(plan: FakePlan) -> dict[str, Any]:
    return {
        "prompt_tokens": plan.usage["prompt_tokens"],
        "completion_tokens": plan.usage["completion_tokens"],
        "total_tokens": plan.usage["prompt_tokens"] + plan.usage["completion_tokens"],
        "prompt_tokens_details": {"cached_tokens": plan.usage["cached_tokens"]},
    }


def _chunks(plan: FakePlan, request: dict[str, Any], *, include_usage: bool) -> Iterator[str]:
    """The SSE data lines of one streamed answer, ending with ``[DONE]``."""
    base = _base(request, plan)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return json.dumps({**base, "choices": [choice]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in plan.content_pieces():
        yield chunk({"content": piece})
    for index, call in enumerate(plan.calls):
        head = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": ""},
        }
        yield chunk({"tool_calls": [head]})
        args = call["arguments"]
        middle = len(args) // 2
        for part in (args[:middle], args[middle:]):
            if part:
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
    yield chunk({}, plan.finish_reason)
    if include_usage:
        yield json.dumps({**base, "choices": [], "usage": _usage(plan)})
    yield "[DONE]"


def _completion(plan: FakePlan, request: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": plan.content}
    if plan.calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in plan.calls
        ]
    return {
        **_base(request, plan),
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": plan.finish_reason}],
        "usage": _usage(plan),
    }


def busiest_window(records: list[RequestRecord], window: float) -> dict[str, int]:
    """The most requests, and the most reported tokens, arriving in any window of
    ``window`` seconds (each window starting at an arrival: where a maximum
    always starts), in one pass over the arrivals in order."""
    arrivals = sorted((r.at, r.tokens) for r in records)
    most_requests = most_tokens = tokens = 0
    start = 0
    for end, (at, spent) in enumerate(arrivals):
        tokens += spent
        while arrivals[start][0] <= at - window:
            tokens -= arrivals[start][1]
            start += 1
        most_requests = max(most_requests, end - start + 1)
        most_tokens = max(most_tokens, tokens)
    return {"requests": most_requests, "tokens": most_tokens}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stint.lab.fake_provider",
        description="Serve a fake OpenAI-compatible chat-completions API on loopback "
        "(no key needed; answers from a script). Stops on SIGTERM or Ctrl-C.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--latency-ms", type=int, default=0, help="wait before the first token")
    parser.add_argument("--token-delay-ms", type=int, default=30, help="wait between tokens")
    parser.add_argument(
        "--script", type=Path, help="JSON list of rules {when, rounds, reply} (default: the demo's)"
    )
    args = parser.parse_args(argv)
    script = (
        FakeScript.from_json(json.loads(args.script.read_text())) if args.script else DEMO_SCRIPT
    )
    fake = FakeProvider(
        script,
        latency_ms=args.latency_ms,
        token_delay_ms=args.token_delay_ms,
        host=args.host,
        port=args.port,
    )

    async def serve() -> None:
        url = await fake.start()
        print(f"fake provider listening: STINT_MODEL_BASE_URL={url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await fake.stop()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
