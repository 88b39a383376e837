"""The worker's side of the telemetry seam: spans and metrics, recorded here only.

Names live in ``stint.telemetry.names``; the services, the runner, the turn
context and the agents harness call the small functions below, and nothing
else in the worker touches OpenTelemetry or the metrics registry.

Both are off until the worker turns them on: spans are non-recording until
``setup_tracing`` installs the SDK (``STINT_TRACING``), and every ``record_*``
call returns at once until ``enable_metrics`` builds the process's one
registry (the worker does when it serves a health port), so a worker that
exports nothing imports neither the SDK nor ``stint.telemetry.metrics``.
Span attributes carry ids and statuses only, never inputs, URLs or secrets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from opentelemetry import trace

from stint.telemetry.names import (
    GEN_AI_OPERATION,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_USAGE_CACHED_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    SPAN_CLAIM,
    SPAN_MODEL,
    SPAN_STEP,
    SPAN_TURN,
)
from stint.telemetry.tracing import setup_tracing, span

if TYPE_CHECKING:
    from stint.telemetry.metrics import WorkerMetrics, WorkerState

__all__ = [
    "GEN_AI_OPERATION",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_USAGE_CACHED_TOKENS",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "SPAN_CLAIM",
    "SPAN_MODEL",
    "SPAN_STEP",
    "SPAN_TURN",
    "enable_metrics",
    "metrics",
    "model_span",
    "record_claim",
    "record_claim_failed",
    "record_handed_back",
    "record_lease_lost",
    "record_parked",
    "record_quota_wait",
    "record_renewal",
    "record_turn_finished",
    "record_turn_started",
    "record_unknown_effect",
    "record_usage",
    "setup_tracing",
    "span",
]

_metrics: WorkerMetrics | None = None

_TOKEN_KINDS = (
    ("input_tokens", "input", GEN_AI_USAGE_INPUT_TOKENS),
    ("output_tokens", "output", GEN_AI_USAGE_OUTPUT_TOKENS),
    ("cached_tokens", "cached", GEN_AI_USAGE_CACHED_TOKENS),
)


def enable_metrics(*, version: str, state: Callable[[], WorkerState]) -> WorkerMetrics:
    """Build this process's registry (once); from now on ``record_*`` counts."""
    global _metrics
    if _metrics is None:
        from stint.telemetry.metrics import WorkerMetrics

        _metrics = WorkerMetrics(version=version, state=state)
    return _metrics


def metrics() -> WorkerMetrics | None:
    """The process's metrics, or None while they are off."""
    return _metrics


@contextmanager
def model_span(model: str, **attributes: str | int | float | bool) -> Iterator[trace.Span]:
    """A model call's span: ``chat`` on ``model`` (a name, never a URL or a key)."""
    with span(SPAN_MODEL) as current:
        current.set_attributes(attributes)
        current.set_attribute(GEN_AI_OPERATION, "chat")
        current.set_attribute(GEN_AI_REQUEST_MODEL, model)
        yield current


def record_usage(
    current: trace.Span,
    usage: Mapping[str, int | None],
    finish_reason: str | None,
    *,
    scope: str | None = None,
    response_model: str | None = None,
) -> None:
    """A model call's token counts, on its span and in ``stint_model_tokens_total``.

    ``scope`` is the label the tokens are counted under: the quota scope the call
    counts against (``STINT_MODEL_QUOTA_SCOPE``) where quotas are configured, else
    the model name.
    A count the provider did not report is left unset (never a made-up zero).
    """
    for key, _, attribute in _TOKEN_KINDS:
        value = usage.get(key)
        if value is not None:
            current.set_attribute(attribute, value)
    if finish_reason:
        current.set_attribute(GEN_AI_RESPONSE_FINISH_REASONS, [finish_reason])
    if response_model:
        current.set_attribute(GEN_AI_RESPONSE_MODEL, response_model)
    m = _metrics
    if m is None:
        return
    label = scope or "unknown"
    m.model_calls.labels(label).inc()
    for key, kind, _ in _TOKEN_KINDS:
        value = usage.get(key)
        if value:
            m.model_tokens.labels(label, kind).inc(value)


def record_quota_wait(scope: str, seconds: float) -> None:
    """The hook for provider quotas: a model call of ``scope`` waited ``seconds``
    for quota (call it once per wait, whether it then ran or was handed back)."""
    m = _metrics
    if m is not None:
        m.quota_waits.labels(scope).inc()
        m.quota_wait_seconds.labels(scope).observe(seconds)


def record_claim(seconds: float, *, claimed: int) -> None:
    m = _metrics
    if m is not None:
        m.claims.inc()
        m.claim_seconds.observe(seconds)
        m.claimed.inc(claimed)


def record_claim_failed() -> None:
    m = _metrics
    if m is not None:
        m.claim_failures.inc()


def record_turn_started(queue_wait: float | None) -> None:
    """A turn attempt started (by a claim, or by the statement that finished the
    slot's previous turn); ``queue_wait`` for a first attempt, from the database clock."""
    m = _metrics
    if m is not None:
        m.turns_started.inc()
        if queue_wait is not None:
            m.queue_wait.observe(queue_wait)


def record_turn_finished(status: str, seconds: float) -> None:
    m = _metrics
    if m is not None:
        m.turns_finished.labels(status).inc()
        m.turn_seconds.labels(status).observe(seconds)


def record_parked() -> None:
    m = _metrics
    if m is not None:
        m.turns_parked.inc()


def record_handed_back(reason: str) -> None:
    m = _metrics
    if m is not None:
        m.handed_back.labels(reason).inc()


def record_renewal(*, ok: bool) -> None:
    m = _metrics
    if m is not None:
        (m.renewals if ok else m.renewal_failures).inc()


def record_lease_lost() -> None:
    m = _metrics
    if m is not None:
        m.leases_lost.inc()


def record_unknown_effect() -> None:
    m = _metrics
    if m is not None:
        m.unknown_effects.inc()
