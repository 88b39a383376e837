"""A straight line through measured points: what one more slot or worker costs."""

from __future__ import annotations

__all__ = ["least_squares_slope"]


def least_squares_slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y on x; None without two distinct x."""
    n = len(points)
    if n < 2:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx
