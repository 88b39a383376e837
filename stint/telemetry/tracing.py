"""OpenTelemetry tracing, off by default, and W3C trace context carried with turns.

``setup_tracing("off")`` does nothing: the OpenTelemetry API then hands out
non-recording spans and the SDK is never imported (it costs a worker several
MiB). ``console`` prints spans; ``otlp`` sends them with the OTLP/HTTP
exporter from the optional ``otlp`` extra, configured by the standard
``OTEL_EXPORTER_OTLP_*`` and ``OTEL_SERVICE_NAME`` variables (left to their
library).

A turn carries its producer's trace context as a ``traceparent`` string
(``00-<trace id>-<span id>-<flags>``): the CLI or the API stores it at
enqueue, and the worker opens the turn's span as that span's child, so one
trace runs from the producer through every attempt of the turn, its steps and
its model calls.
"""

from __future__ import annotations

import re
import sys
from contextlib import AbstractContextManager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from stint.errors import StintError

__all__ = [
    "EXPORTERS",
    "TracingUnavailable",
    "current_traceparent",
    "format_traceparent",
    "parent_context",
    "parse_traceparent",
    "setup_tracing",
    "span",
]

EXPORTERS = ("off", "console", "otlp")

_TRACEPARENT = re.compile(
    r"(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<span>[0-9a-f]{16})-(?P<flags>[0-9a-f]{2})"
)

_tracer = trace.get_tracer("stint")


class TracingUnavailable(StintError):
    """Tracing was asked for, but its exporter is not installed."""


def setup_tracing(exporter: str, *, service_name: str) -> bool:
    """Install the SDK with ``exporter`` (see module doc); False when off."""
    if exporter == "off":
        return False
    # Imported here, never at module level: an untraced process must not pay for them.
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    chosen: SpanExporter
    if exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise TracingUnavailable(
                "STINT_TRACING=otlp needs the OTLP exporter: pip install 'stint[otlp]'"
            ) from exc
        chosen = OTLPSpanExporter()
    elif exporter == "console":
        chosen = ConsoleSpanExporter(out=sys.stderr)  # stdout is the CLI's JSON output
    else:
        raise ValueError(f"unknown exporter {exporter!r}; expected one of {EXPORTERS}")
    # OTEL_SERVICE_NAME, when set, wins over this default (Resource.create reads it).
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
    provider.add_span_processor(BatchSpanProcessor(chosen))
    trace.set_tracer_provider(provider)
    return True


def parse_traceparent(text: str | None) -> SpanContext | None:
    """The remote span context a W3C ``traceparent`` names, or None when it is
    absent or malformed (the spec says to ignore an invalid header, not refuse)."""
    if not text:
        return None
    match = _TRACEPARENT.fullmatch(text.strip())
    if match is None or match["version"] == "ff":
        return None
    trace_id, span_id = int(match["trace"], 16), int(match["span"], 16)
    if trace_id == 0 or span_id == 0:
        return None
    return SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(match["flags"], 16) & 1)
    )


def format_traceparent(context: SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def current_traceparent() -> str | None:
    """The active span's context as a ``traceparent``, or None when no valid span
    is active (tracing off and no remote parent)."""
    context = trace.get_current_span().get_span_context()
    return format_traceparent(context) if context.is_valid else None


def parent_context(traceparent: str | None) -> Context | None:
    """A context whose current span is the remote parent ``traceparent`` names."""
    remote = parse_traceparent(traceparent)
    if remote is None:
        return None
    return trace.set_span_in_context(NonRecordingSpan(remote))


class _Untraced:
    """What ``span`` opens while no tracer provider is installed (tracing off) and
    no remote parent is given: nothing. The span it hands out is the active one
    (what OpenTelemetry's no-op tracer would make: a non-recording span of the
    same context), so a traceparent read inside still names the producer's
    trace; no context is switched, no generator made, nothing per turn."""

    __slots__ = ()

    def __enter__(self) -> trace.Span:
        return trace.get_current_span()

    def __exit__(self, *exc: object) -> None:
        return None


_UNTRACED = _Untraced()


def _tracing_on() -> bool:
    """Is a tracer provider installed (``setup_tracing``, or a test's own)?"""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def span(
    name: str,
    *,
    parent: str | None = None,
    record_errors: bool = True,
    **attributes: str | int | float | bool,
) -> AbstractContextManager[trace.Span]:
    """Open a span named from ``stint.telemetry.names``, as a child of the active
    span, or of the remote span ``parent`` (a traceparent) when one is given.
    ``record_errors=False`` for a block whose exception is control flow (a turn
    parking on a question), not a failure. Off (no provider) and without a
    parent, it costs nothing (``_Untraced``)."""
    if parent is None and not _tracing_on():
        return _UNTRACED
    return _tracer.start_as_current_span(
        name,
        context=parent_context(parent),
        attributes=attributes,
        record_exception=record_errors,
        set_status_on_exception=record_errors,
    )
