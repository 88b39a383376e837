"""Measurement-only reads for the webhook latency figures (``stint.lab.webhook_latency``)."""

from __future__ import annotations

from dataclasses import dataclass

from stint.store.config import StoreConfig
from stint.store.fetch import fetch_all
from stint.store.pool import Pool
from stint.store.translate import guarded

__all__ = ["WebhookProbe"]


@dataclass(frozen=True)
class _Seconds:
    seconds: float


@dataclass(frozen=True)
class _StatusCount:
    status: str
    count: int


class WebhookProbe:
    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def _seconds(self, name: str) -> list[float]:
        async with guarded(name, self._config), self._pool.connection() as conn:
            return [row.seconds for row in await fetch_all(conn, _Seconds, name)]

    async def turn_latencies(self) -> list[float]:
        """Seconds from enqueue to finish, one per finished turn."""
        return await self._seconds("probe_turn_latencies")

    async def delivery_lags(self) -> list[float]:
        """Seconds from an event's append to its delivery, one per delivered webhook."""
        return await self._seconds("probe_delivery_lags")

    async def deliveries_by_status(self) -> dict[str, int]:
        async with (
            guarded("probe_deliveries_by_status", self._config),
            self._pool.connection() as c,
        ):
            rows = await fetch_all(c, _StatusCount, "probe_deliveries_by_status")
        return {row.status: row.count for row in rows}
