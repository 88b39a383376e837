"""Acceptance: traces from producer to worker over OTLP (the ``otlp`` extra).

A tiny OTLP/HTTP receiver (protobuf, as the exporter sends it) collects what
real processes export. A turn queued with a traceparent (``stint enqueue
--traceparent``, or the CLI's own stint.enqueue span when it traces too) is
run by a worker whose claim, turn and step spans join that trace.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, fetch

pytestmark = pytest.mark.acceptance

PRODUCER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER_SPAN = "00f067aa0ba902b7"


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    service: str


class _Receiver(BaseHTTPRequestHandler):
    spans: list[Span]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource.resource.attributes
                    if a.key == "service.name"
                ),
                "",
            )
            for scope in resource.scope_spans:
                for s in scope.spans:
                    self.spans.append(
                        Span(
                            s.name,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            {a.key: _value(a.value) for a in s.attributes},
                            service,
                        )
                    )
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@pytest.fixture
def collector() -> Iterator[tuple[str, list[Span]]]:
    spans: list[Span] = []
    handler = type("Receiver", (_Receiver,), {"spans": spans})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", spans
    finally:
        server.shutdown()
        server.server_close()


def _otlp_env(endpoint: str) -> dict[str, str]:
    return {
        "STINT_TRACING": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }


async def _finished(pool: Pool, count: int) -> bool:
    rows = await fetch(pool, "SELECT count(*) FROM turns WHERE status = 'succeeded'")
    return int(rows[0][0]) == count


async def test_the_worker_continues_the_producers_trace(
    cluster: Cluster, pool: Pool, collector: tuple[str, list[Span]]
) -> None:
    endpoint, spans = collector
    cluster.env.update(_otlp_env(endpoint))
    worker = cluster.start_worker(slots=1)
    given = f"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01"
    # A producer that does not trace itself hands its context over explicitly.
    quiet = cluster.stint(
        "enqueue", "--traceparent", given, json.dumps({"min_wait_ms": 0}), STINT_TRACING="off"
    )
    assert quiet.returncode == 0, quiet.stderr
    # A producer that traces: its stint.enqueue span is the parent.
    traced = cluster.stint("enqueue", json.dumps({"min_wait_ms": 0}))
    assert traced.returncode == 0, traced.stderr
    await wait_until(lambda: _finished(pool, 2), what="both turns finished")
    stored = await fetch(pool, "SELECT traceparent FROM turns ORDER BY enqueued_at")
    assert stored[0][0] == given

    def turn_spans() -> list[Span]:
        return [s for s in spans if s.name == "stint.turn"]

    async def exported() -> bool:
        return len(turn_spans()) == 2 and any(s.name == "stint.enqueue" for s in spans)

    await wait_until(exported, what="the spans reached the collector")
    first, second = sorted(turn_spans(), key=lambda s: s.trace_id != PRODUCER_TRACE)
    assert (first.trace_id, first.parent_id) == (PRODUCER_TRACE, PRODUCER_SPAN)
    assert first.service == "stint-worker"
    assert first.attributes["status"] == "succeeded"
    enqueue = next(s for s in spans if s.name == "stint.enqueue")
    assert enqueue.service == "stint-cli"
    assert (second.trace_id, second.parent_id) == (enqueue.trace_id, enqueue.span_id)
    assert stored[1][0].startswith(f"00-{enqueue.trace_id}-{enqueue.span_id}-")
    # Each turn's step (the scripted harness's journal tool) is its child.
    steps = [s for s in spans if s.name == "stint.step"]
    assert {(s.trace_id, s.parent_id) for s in steps} == {
        (first.trace_id, first.span_id),
        (second.trace_id, second.span_id),
    }
    assert all(s.attributes["kind"] == "tool" for s in steps)
    assert any(s.name == "stint.claim" for s in spans)
    worker.signal(signal.SIGTERM)
    assert await asyncio.to_thread(worker.wait) == 0
    everything = json.dumps([s.attributes for s in spans])
    assert cluster.db.conninfo not in everything
