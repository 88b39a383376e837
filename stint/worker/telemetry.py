"""Telemetry at one seam: the span names Stint emits and the helper that opens them.

Without a configured SDK the OpenTelemetry API hands out non-recording spans,
so this costs next to nothing (the SDK is not even imported). ``setup_tracing``
installs the SDK with a console exporter when ``OTEL_TRACES_EXPORTER=console``;
any other exporter is left to an OpenTelemetry distribution that configures the
global provider.
Span attributes carry ids and statuses only, never inputs, URLs or secrets.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace

__all__ = ["SPAN_CLAIM", "SPAN_TURN", "setup_tracing", "span"]

SPAN_TURN = "stint.turn"
SPAN_CLAIM = "stint.claim"

_tracer = trace.get_tracer("stint.worker")


@contextmanager
def span(name: str, **attributes: str | int | float | bool) -> Iterator[trace.Span]:
    """Open a span named from this module's constants."""
    with _tracer.start_as_current_span(name, attributes=attributes) as current:
        yield current


def setup_tracing() -> None:
    """Install the SDK with a console exporter when asked to (see module doc)."""
    if os.environ.get("OTEL_TRACES_EXPORTER", "") != "console":
        return
    # Imported here: the SDK (and the psutil it pulls in) costs a worker several
    # MiB of memory that an untraced worker should not pay.
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
