"""Exponential backoff with jitter, so a down database sees no reconnect storm.

Every caller that re-opens a store connection after losing it paces itself
with this (the worker's listener and claimer, the CLI follower, the API's
event hub), so it lives with the store rather than in one of them."""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """``cap`` bounds every delay: after an outage the first attempt that can
    succeed comes at most ``cap`` seconds after the database is back
    (``StoreConfig.reconnect_max``, ``STINT_RECONNECT_MAX_SECONDS``)."""

    def __init__(self, *, first: float = 0.1, cap: float = 1.0) -> None:
        self._first = first
        self._cap = cap
        self._next = first

    def reset(self) -> None:
        self._next = self._first

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._cap, self._next * 2)
        return delay * random.uniform(0.5, 1.0)
