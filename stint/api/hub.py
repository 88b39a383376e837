"""One LISTEN connection per API process, fanned out to every event follower.

A follower registers interest in one session and gets woken when that
session's log grows; it then reads what is new itself, from PostgreSQL, by
its own cursor. The hub carries no events and keeps none: a notification is
only a hint ("read again"), so there is no replay buffer to size or expire,
and a follower that resumes from ``Last-Event-ID`` is served by the same read
as one that never left. When the LISTEN connection is lost the hub
reconnects with backoff and then wakes every follower, so whatever was
missed meanwhile is found by their reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from uuid import UUID

from stint.store.backoff import Backoff
from stint.store.config import ROLE_API_LISTEN, StoreConfig
from stint.store.errors import StoreError
from stint.store.listen import Listener

__all__ = ["EventHub", "Subscription"]

log = logging.getLogger("stint.api.hub")


class Subscription:
    """One follower's wake-up for one session.

    ``clear()`` before reading, ``wait()`` after: a notification that arrives
    during the read sets the flag again, so it is never lost.
    """

    def __init__(self, session_id: UUID) -> None:
        self.session_id = session_id
        self._woken = asyncio.Event()
        self.closed = False

    def wake(self) -> None:
        self._woken.set()

    def clear(self) -> None:
        self._woken.clear()

    async def wait(self, seconds: float) -> bool:
        """True when woken (or the hub closed) within ``seconds``."""
        try:
            async with asyncio.timeout(seconds):
                await self._woken.wait()
        except TimeoutError:
            return False
        return True


class EventHub:
    """``start()`` once, ``subscribe()`` per follower, ``stop()`` at shutdown."""

    def __init__(self, config: StoreConfig) -> None:
        self._config = config
        self._followers: dict[str, set[Subscription]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.listening = asyncio.Event()
        self.notifications = 0
        self.reconnects = 0

    @property
    def followers(self) -> int:
        return sum(len(subs) for subs in self._followers.values())

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="stint-api-hub")

    def close_followers(self) -> None:
        """Shutting down: wake every follower with ``closed`` set, so streams end now."""
        self._closing = True
        for subs in self._followers.values():
            for sub in subs:
                sub.closed = True
                sub.wake()

    async def stop(self) -> None:
        self.close_followers()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @contextlib.contextmanager
    def subscribe(self, session_id: UUID) -> Iterator[Subscription]:
        sub = Subscription(session_id)
        sub.closed = self._closing
        key = str(session_id)
        self._followers.setdefault(key, set()).add(sub)
        try:
            yield sub
        finally:
            subs = self._followers.get(key)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._followers[key]

    def dispatch(self, payload: str) -> None:
        """One notification: wake the followers of the session it names."""
        self.notifications += 1
        for sub in self._followers.get(payload, ()):
            sub.wake()

    def _wake_all(self) -> None:
        for subs in self._followers.values():
            for sub in subs:
                sub.wake()

    async def _run(self) -> None:
        backoff = Backoff(cap=self._config.reconnect_max)
        channel = self._config.events_channel
        while True:
            try:
                async with Listener(self._config, channels=[channel], role=ROLE_API_LISTEN) as lst:
                    backoff.reset()
                    if self.reconnects:
                        log.info(
                            "event hub listening again (%d connection(s) lost so far)",
                            self.reconnects,
                        )
                    self.listening.set()
                    self._wake_all()  # catch up on anything missed while disconnected
                    async for _, payload in lst.notifications():
                        self.dispatch(payload)
            except StoreError as exc:
                self.listening.clear()
                self.reconnects += 1
                log.warning("event hub lost its LISTEN connection: %s", exc)
                await asyncio.sleep(backoff.next_delay())
