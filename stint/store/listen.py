"""LISTEN on one channel over a dedicated autocommit connection.

NOTIFY is only a hint: callers must still poll or catch up by cursor, because
notifications sent while the connection was down are gone. A lost connection
surfaces as ``ConnectionFailed``; the caller reconnects and then catches up.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from types import TracebackType

from psycopg import AsyncConnection, sql
from psycopg.rows import TupleRow

from stint.store.config import StoreConfig
from stint.store.errors import ConnectionFailed
from stint.store.pool import connect
from stint.store.queries import query
from stint.store.translate import translated

__all__ = ["Listener"]


class Listener:
    """``async with Listener(...) as l: async for channel, payload in l.notifications()``."""

    def __init__(self, config: StoreConfig, *, channels: Sequence[str], role: str) -> None:
        self._config = config
        self._channels = list(channels)
        self._role = role
        self._conn: AsyncConnection[TupleRow] | None = None

    async def __aenter__(self) -> Listener:
        self._conn = await connect(self._config, self._role)
        with translated("listen"):
            try:
                for channel in self._channels:
                    statement = sql.SQL(query("listen_channel")).format(
                        channel=sql.Identifier(channel)
                    )
                    await self._conn.execute(statement)
            except BaseException:
                await self._conn.close()
                raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def notifications(
        self, *, listen_seconds: float | None = None
    ) -> AsyncIterator[tuple[str, str]]:
        """Yield each notification's (channel, payload). Without ``listen_seconds`` this runs until
        the connection is lost (``ConnectionFailed``); with one, it simply ends
        after that many seconds."""
        if self._conn is None:
            raise ConnectionFailed("listener is not connected", channels=self._channels)
        with translated("listen"):
            async for notify in self._conn.notifies(timeout=listen_seconds):
                yield notify.channel, notify.payload
        if listen_seconds is None:
            raise ConnectionFailed("listener connection ended", channels=self._channels)
