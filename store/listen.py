"""LISTEN on one channel over a dedicated autocommit connection.

NOTIFY is only a hint: callers must still poll or catch up by cursor, because
notifications sent while the connection was down are gone. A lost connection
surfaces as ``ConnectionFailed``; the caller reconnects and then catches up.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType

from psycopg import AsyncConnection, sql
from psycopg.rows import TupleRow

from store.config import StoreConfig
from store.errors import ConnectionFailed
from store.pool import connect
from store.queries import query
from store.translate import translated

__all__ = ["Listener"]


class Listener:
    """``async with Listener(...) as listener: async for payload in listener.payloads()``."""

    def __init__(self, config: StoreConfig, *, channel: str, role: str) -> None:
        self._config = config
        self._channel = channel
        self._role = role
        self._conn: AsyncConnection[TupleRow] | None = None

    async def __aenter__(self) -> Listener:
        self._conn = await connect(self._config, self._role)
        statement = sql.SQL(query("listen_channel")).format(channel=sql.Identifier(self._channel))
        with translated("listen"):
            try:
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

    async def payloads(self, *, listen_seconds: float | None = None) -> AsyncIterator[str]:
        """Yield each notification's payload. Without ``listen_seconds`` this runs until
        the connection is lost (``ConnectionFailed``); with one, it simply ends
        after that many seconds."""
        if self._conn is None:
            raise ConnectionFailed("listener is not connected", channel=self._channel)
        with translated("listen"):
            async for notify in self._conn.notifies(timeout=listen_seconds):
                yield notify.payload
        if listen_seconds is None:
            raise ConnectionFailed("listener connection ended", channel=self._channel)
