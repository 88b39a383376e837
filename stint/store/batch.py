"""Group commit: the statements of many slots share one transaction and one round trip.

A worker's slots each wait for their own durable write (a step started, a
step committed, a turn finished). Sent one by one, each write is a round trip
and a commit (a WAL flush) of its own, and a worker with many slots spends its
time, and PostgreSQL's, on those. The batcher queues the writes and sends
whatever has gathered as one pipelined transaction over one connection of a
small pool: under load, batches grow by themselves; alone, a write goes out at
once in a batch of one.

Nothing is weakened. Every statement still carries its own fence (owner and
epoch) and returns its own row, so a lost lease still means that statement
wrote nothing; the slot still waits until its write is committed before it
acts on it. If any statement of a batch fails, the whole transaction rolls
back and each statement of it is run again alone, so one bad statement fails
only its own caller.

A statement may wait long between its call and its sending (for a connection,
through an outage): a parameter that must be true when the statement runs, not
when it was queued, is passed as ``Late`` and read as the statement is sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from psycopg import AsyncConnection
from psycopg.rows import AsyncRowFactory, TupleRow, class_row, tuple_row

from stint.store.config import StoreConfig
from stint.store.errors import StoreError
from stint.store.fetch import run_numbered
from stint.store.interleave import current_gate
from stint.store.pool import Pool
from stint.store.translate import guarded

__all__ = ["BatchStats", "Late", "StatementBatcher", "now"]

log = logging.getLogger("stint.store")

R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True)
class Late(Generic[T]):
    """A statement parameter read as the statement is sent, not when it is queued.

    A worker decides at the call whether the statement may claim (it has not
    fenced itself); a statement that then waits through an outage for a
    connection runs after the fence fell, and what it claimed is handed back
    unrun, an attempt spent for nothing. ``Late(may_claim)`` asks again at the
    sending."""

    read: Callable[[], T]


def now(value: T | Late[T]) -> T:
    """A parameter's value as it is now (a ``Late`` one read)."""
    return value.read() if isinstance(value, Late) else value


@dataclass
class _Pending(Generic[R]):
    name: str
    params: Mapping[str, Any]
    row: type[R]
    many: bool
    lock_order: str
    future: asyncio.Future[Any]
    prelude: str | None = None
    late: tuple[str, ...] = ()


def _sent(pending: _Pending[Any]) -> Mapping[str, Any]:
    """The parameters as sent: the ``Late`` ones (found once, at the submit) read
    now; a statement without any is sent as queued, not copied."""
    if not pending.late:
        return pending.params
    return {**pending.params, **{k: pending.params[k].read() for k in pending.late}}


@dataclass
class BatchStats:
    """Counters for reports: how well writes were grouped."""

    batches: int = 0
    statements: int = 0
    largest: int = 0
    rerun_alone: int = 0


class StatementBatcher:
    """``await fetch_optional(name, row, params)``; at most ``concurrency`` batches
    are in flight at once (one per pooled connection)."""

    def __init__(
        self, config: StoreConfig, pool: Pool, *, concurrency: int, max_batch: int = 64
    ) -> None:
        self._config = config
        self._pool = pool
        self._concurrency = concurrency
        self._max_batch = max_batch
        self._queue: list[_Pending[Any]] = []
        self._flushing = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.stats = BatchStats()

    async def fetch_optional(
        self,
        name: str,
        row: type[R],
        params: Mapping[str, Any],
        *,
        lock_order: str = "",
        prelude: str | None = None,
    ) -> R | None:
        """Run statement ``name`` in the next batch; its first row, or None.

        ``lock_order`` is the key of the row the statement waits to lock (a
        session id): a batch sends its statements in that order, so two
        transactions that lock rows of one worker's sessions (another batch,
        the lease renewal) always lock them in the same order and never
        deadlock. Statements with the same key keep the order they came in.

        ``prelude`` names a statement sent just before it, with the same
        parameters, in the same transaction (its rows ignored): a lock taken
        there is held when ``name`` takes its snapshot, so ``name`` reads every
        row committed by whoever held that lock before (READ COMMITTED gives
        each statement of a transaction its own snapshot)."""
        found: R | None = await self._submit(
            name, row, params, many=False, lock_order=lock_order, prelude=prelude
        )
        return found

    async def fetch_all(self, name: str, row: type[R], params: Mapping[str, Any]) -> list[R]:
        """Run statement ``name`` in the next batch; all its rows. For statements
        that wait for no lock (claims skip locked rows): they go first."""
        found: list[R] = await self._submit(name, row, params, many=True, lock_order="")
        return found

    async def _submit(
        self,
        name: str,
        row: type[R],
        params: Mapping[str, Any],
        *,
        many: bool,
        lock_order: str,
        prelude: str | None = None,
    ) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        late = tuple(k for k, v in params.items() if type(v) is Late)
        self._queue.append(_Pending(name, params, row, many, lock_order, future, prelude, late))
        self._start_flushes()
        return await future

    def _start_flushes(self) -> None:
        while self._queue and self._flushing < self._concurrency:
            batch = [p for p in self._queue[: self._max_batch] if not p.future.done()]
            batch.sort(key=lambda p: p.lock_order)  # stable: one row's statements keep their order
            del self._queue[: self._max_batch]
            if not batch:
                continue
            self._flushing += 1
            task = asyncio.create_task(self._flush(batch), name="stint-batch")
            self._tasks.add(task)
            task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._flushing -= 1
        self._start_flushes()

    async def _flush(self, batch: list[_Pending[Any]]) -> None:
        self._count(batch)
        try:
            rows = await self._run_together(batch)
        except StoreError as exc:
            if len(batch) == 1:
                _settle(batch[0], exc)
                return
            log.info("a batch of %d failed (%s); running each alone", len(batch), exc)
            self.stats.rerun_alone += len(batch)
            for pending in batch:
                try:
                    [row] = await self._run_together([pending])
                except StoreError as alone:
                    _settle(pending, alone)
                else:
                    _settle(pending, row)
            return
        except BaseException as exc:  # cancelled, or a bug: no caller may hang
            for pending in batch:
                _settle(pending, exc)
            raise
        for pending, row in zip(batch, rows, strict=True):
            _settle(pending, row)

    async def _run_together(self, batch: list[_Pending[Any]]) -> list[Any]:
        operation = batch[0].name if len(batch) == 1 else f"batch of {len(batch)}"
        if (gate := current_gate()) is not None:
            await gate("batch:" + ",".join(p.name for p in batch))
        async with guarded(operation, self._config), self._pool.connection() as conn:
            return await _pipelined(conn, batch)

    def _count(self, batch: list[_Pending[Any]]) -> None:
        self.stats.batches += 1
        self.stats.statements += len(batch)
        self.stats.largest = max(self.stats.largest, len(batch))

    async def close(self) -> None:
        """Wait for the batches in flight (their callers are waiting for them too)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def _pipelined(conn: AsyncConnection[TupleRow], batch: list[_Pending[Any]]) -> list[Any]:
    """One transaction, one round trip: every statement sent, then one commit."""
    cursors = []
    async with conn.transaction(), conn.pipeline():
        for pending in batch:
            params = _sent(pending)
            if pending.prelude is not None:
                await run_numbered(conn, pending.prelude, params, tuple_row, interleave=False)
            cursors.append(
                await run_numbered(
                    conn, pending.name, params, _class_row(pending.row), interleave=False
                )
            )
    return [
        await (cursor.fetchall() if pending.many else cursor.fetchone())
        for pending, cursor in zip(batch, cursors, strict=True)
    ]


_ROW_FACTORIES: dict[type[Any], AsyncRowFactory[Any]] = {}


def _class_row(row: type[R]) -> AsyncRowFactory[R]:
    """psycopg's row factory for ``row``, made once per row class, not per statement."""
    found = _ROW_FACTORIES.get(row)
    if found is None:
        found = _ROW_FACTORIES[row] = class_row(row)
    return found


def _settle(pending: _Pending[Any], outcome: Any) -> None:
    if pending.future.done():
        return  # the caller gave up (it was cancelled); the statement ran anyway
    if isinstance(outcome, asyncio.CancelledError):
        pending.future.cancel()
    elif isinstance(outcome, BaseException):
        pending.future.set_exception(outcome)
    else:
        pending.future.set_result(outcome)
