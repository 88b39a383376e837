"""Figures of one burst, computed from PostgreSQL audit timestamps only."""

from __future__ import annotations

from collections.abc import Sequence

from stint.lab.model import CaseSpec, PhaseFigures
from stint.ops.stats import percentile
from stint.store.models import TurnTiming

__all__ = ["first_wave_waits", "handoffs", "max_concurrent_turns", "phase_figures", "timeline"]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def phase_figures(spec: CaseSpec, timings: Sequence[TurnTiming]) -> PhaseFigures:
    """Throughput over the burst: from the first enqueue to the last finish."""
    start = min(t.enqueued_at for t in timings)
    interval = max(t.finished_at for t in timings) - start
    rate = len(timings) / interval if interval > 0 else 0.0
    e2e = [t.end_to_end for t in timings]
    claims = first_wave_waits(timings, spec.total_slots)
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
        handoff_p50_ms=_ms(percentile(handoffs(timings), 50)),
        handoff_p95_ms=_ms(percentile(handoffs(timings), 95)),
        claim_p50_ms=_ms(percentile(claims, 50)),
        claim_p95_ms=_ms(percentile(claims, 95)),
    )


def first_wave_waits(timings: Sequence[TurnTiming], slots: int) -> list[float]:
    """Queue waits of the first ``slots`` turns to start: in a burst onto idle
    workers each of them found a slot free, so the wait is the claim's latency
    (the NOTIFY, the claim statement, the slot starting), not queueing."""
    first = sorted(timings, key=lambda t: t.started_at)[:slots]
    return [t.queue_wait for t in first]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def handoffs(timings: Sequence[TurnTiming]) -> list[float]:
    """For each turn a worker started after one of its own turns had finished,
    with the turn already waiting then: the seconds from that finish to this
    start. What a freed slot costs before it is busy again (0 when one
    statement finished the last turn and started this one)."""
    gaps: list[float] = []
    by_worker: dict[str | None, list[TurnTiming]] = {}
    for t in timings:
        by_worker.setdefault(t.worker_id, []).append(t)
    for turns in by_worker.values():
        finishes = sorted(t.finished_at for t in turns)
        for t in turns:
            before = [f for f in finishes if f <= t.started_at and f >= t.enqueued_at]
            if before:
                gaps.append(t.started_at - before[-1])
    return gaps


def timeline(timings: Sequence[TurnTiming]) -> list[list[float]]:
    """[worker index, enqueued, started, finished] per turn, in ms from the first enqueue."""
    if not timings:
        return []
    zero = min(t.enqueued_at for t in timings)
    workers = sorted({t.worker_id or "" for t in timings})
    return [
        [
            workers.index(t.worker_id or ""),
            round((t.enqueued_at - zero) * 1000, 2),
            round((t.started_at - zero) * 1000, 2),
            round((t.finished_at - zero) * 1000, 2),
        ]
        for t in sorted(timings, key=lambda t: t.started_at)
    ]


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
