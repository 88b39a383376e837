"""The overview's turns/s chart: the sampler's ring drawn as an inline SVG polyline
(no chart library, no script: the server computes the points)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stint.store.stats import Sample

__all__ = ["Chart", "turns_per_second"]

WIDTH = 600
HEIGHT = 160


@dataclass(frozen=True)
class Chart:
    points: str  # "x,y x,y ..." in the viewBox 0 0 WIDTH HEIGHT
    peak: float  # turns/s at the top of the chart
    seconds: float  # the time the chart spans
    width: int = WIDTH
    height: int = HEIGHT


def turns_per_second(samples: Sequence[Sample]) -> Chart | None:
    """Newest-first samples as a chart, oldest on the left; None for fewer than two."""
    if len(samples) < 2:
        return None
    ordered = list(reversed(samples))
    start = ordered[0].at
    span = max((ordered[-1].at - start).total_seconds(), 1e-3)
    rates = [s.turns_per_second for s in ordered]
    peak = max(max(rates), 1e-9)
    points = " ".join(
        f"{(s.at - start).total_seconds() / span * WIDTH:.1f},"
        f"{HEIGHT - rate / peak * (HEIGHT - 10):.1f}"
        for s, rate in zip(ordered, rates, strict=True)
    )
    return Chart(points=points, peak=max(rates), seconds=span)
