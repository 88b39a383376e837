"""Figures of one burst, computed from PostgreSQL audit timestamps only."""

from __future__ import annotations

from collections.abc import Sequence

from stint.loadtest.model import CaseSpec, PhaseFigures
from stint.ops.stats import percentile
from stint.store.models import TurnTiming

__all__ = ["max_concurrent_turns", "phase_figures"]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def phase_figures(spec: CaseSpec, timings: Sequence[TurnTiming]) -> PhaseFigures:
    """Throughput over the burst: from the first enqueue to the last finish."""
    start = min(t.enqueued_at for t in timings)
    interval = max(t.finished_at for t in timings) - start
    rate = len(timings) / interval if interval > 0 else 0.0
    e2e = [t.end_to_end for t in timings]
    return PhaseFigures(
        turns=len(timings),
        succeeded=sum(1 for t in timings if t.status == "succeeded"),
        interval_s=round(interval, 4),
        turns_per_s=round(rate, 3),
        fraction_of_limit=round(rate / spec.physical_limit, 4),
        e2e_p50_s=_round(percentile(e2e, 50)),
        e2e_p95_s=_round(percentile(e2e, 95)),
        e2e_max_s=_round(max(e2e, default=None) if e2e else None),
        queue_wait_p95_s=_round(percentile([t.queue_wait for t in timings], 95)),
    )


def max_concurrent_turns(timings: Sequence[TurnTiming]) -> int:
    """Most turns running at one instant, from their [start, finish] audit times
    (as stored: a finish and the next start taken by one statement are equal, and
    must not look overlapping through floating-point arithmetic)."""
    edges: list[tuple[float, int]] = []
    for t in timings:
        edges.append((t.started_at, 1))
        edges.append((t.finished_at, -1))
    running = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        running += step
        peak = max(peak, running)
    return peak
