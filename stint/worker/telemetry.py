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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import trace

__all__ = [
    "GEN_AI_OPERATION",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_USAGE_CACHED_TOKENS",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "SPAN_CLAIM",
    "SPAN_MODEL",
    "SPAN_TURN",
    "model_span",
    "record_usage",
    "setup_tracing",
    "span",
]

SPAN_TURN = "stint.turn"
SPAN_CLAIM = "stint.claim"
SPAN_MODEL = "stint.model"  # one provider call of the agents harness (retries inside it)

# OpenTelemetry GenAI semantic conventions, set on SPAN_MODEL.
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHED_TOKENS = "gen_ai.usage.cache_read.input_tokens"

_tracer = trace.get_tracer("stint.worker")


@contextmanager
def span(name: str, **attributes: str | int | float | bool) -> Iterator[trace.Span]:
    """Open a span named from this module's constants."""
    with _tracer.start_as_current_span(name, attributes=attributes) as current:
        yield current


@contextmanager
def model_span(model: str, **attributes: str | int | float | bool) -> Iterator[trace.Span]:
    """A model call's span: ``chat`` on ``model`` (a name, never a URL or a key)."""
    with span(SPAN_MODEL, **attributes) as current:
        current.set_attribute(GEN_AI_OPERATION, "chat")
        current.set_attribute(GEN_AI_REQUEST_MODEL, model)
        yield current


def record_usage(
    current: trace.Span, usage: Mapping[str, int | None], finish_reason: str | None
) -> None:
    """Token counts the provider reported; a count it did not report is left unset."""
    for key, attribute in (
        ("input_tokens", GEN_AI_USAGE_INPUT_TOKENS),
        ("output_tokens", GEN_AI_USAGE_OUTPUT_TOKENS),
        ("cached_tokens", GEN_AI_USAGE_CACHED_TOKENS),
    ):
        value = usage.get(key)
        if value is not None:
            current.set_attribute(attribute, value)
    if finish_reason:
        current.set_attribute(GEN_AI_RESPONSE_FINISH_REASONS, [finish_reason])


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
