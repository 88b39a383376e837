"""Small, exact statistics for reports: nearest-rank percentiles, no interpolation."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["percentile"]


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile (the value at rank ceil(pct/100 * n)); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]
