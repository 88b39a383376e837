"""The roster: which worker a session's work notification wakes.

A NOTIFY on the work channel reaches every worker, and each with a free slot
used to claim: with N workers, N claims for one ready session and N - 1 of
them finding nothing (the claim herd: about 4.5 claims a turn in the scale
soak's 4 workers, half its statements; docs/benchmarks.md section 9). An
enqueue that makes a session ready now names it in the notification
(``"<session id>"``, or ``"<session id> <pin>"`` for a pinned one), and the
session id picks one worker among the live running ones that accept its pin,
in id order: that worker claims, the others let it pass.

Nothing here decides whether a ready session is found, only how soon:

- every worker still polls every ``poll_interval`` (NOTIFY is a hint, polling
  the truth), so a session whose picked worker is dead, paused or not yet in
  this worker's roster is claimed at worst a poll later;
- a picked worker that cannot claim now (its slots full, stopping, fenced)
  passes the notification on to all (an empty payload, as before);
- a notification that names no session (a batch enqueue, a finish or resume
  that leaves a session ready) wakes every worker, as before;
- until the first read, or when this worker finds itself the only one, every
  notification wakes it.

Workers read the roster every third of a lease, and at once when a worker
registers, begins draining or stops (it says so on the work channel); a worker
that dies stays in the others' rosters until its heartbeat is a lease old. While
views differ, two workers claim (one finds nothing, as before) or none (the poll).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from uuid import UUID

from stint.store.errors import StoreError
from stint.store.models import WorkerPeer
from stint.worker.protocols import WorkerStore
from stint.worker.service import Service, Wakeup

__all__ = ["Roster", "RosterKeeper", "Wake", "route"]

log = logging.getLogger("stint.worker")


class Roster:
    """The live workers as this one last read them, and the pick they imply."""

    def __init__(self, worker_id: str, pins: Sequence[str]) -> None:
        self._me = WorkerPeer(worker_id, tuple(pins))
        self._peers: tuple[WorkerPeer, ...] = (self._me,)

    @property
    def peers(self) -> tuple[WorkerPeer, ...]:
        return self._peers

    def update(self, peers: Iterable[WorkerPeer]) -> bool:
        """Take a fresh read; True when the set of workers changed. This worker is
        always in it (a read that missed its heartbeat does not make it nobody's)."""
        by_id = {peer.worker_id: peer for peer in peers}
        by_id[self._me.worker_id] = self._me
        fresh = tuple(by_id[worker_id] for worker_id in sorted(by_id))
        changed = fresh != self._peers
        self._peers = fresh
        return changed

    def picks_me(self, payload: str) -> bool:
        """Whether a work notification's payload is this worker's to claim for. An
        empty or unreadable payload, or a pin no known worker accepts, is everyone's."""
        if not payload or len(self._peers) == 1:
            return True
        session, _, pin = payload.partition(" ")
        try:
            number = UUID(session).int
        except ValueError:
            return True
        takers = [p for p in self._peers if not pin or pin in p.pins]
        if not takers:
            return True
        return takers[number % len(takers)].worker_id == self._me.worker_id


class Wake(Enum):
    """What a worker does with a work notification."""

    CLAIM = "claim"  # wake this worker's claimer
    PASS_ON = "pass on"  # picked, but cannot claim now: wake every worker (work_nudge)
    LET_PASS = "let pass"  # another worker was picked; this one's poll is the fallback


def route(roster: Roster, payload: str, *, free: int, claiming: bool) -> Wake:
    """The decision for one notification on the work channel, given this worker's
    free slots and whether its claimer claims (not stopping, not fenced)."""
    if not payload:
        return Wake.CLAIM  # everyone's; the claimer itself skips a claim with no free slot
    if not roster.picks_me(payload):
        return Wake.LET_PASS
    if (free > 0 and claiming) or len(roster.peers) == 1:
        return Wake.CLAIM  # alone, there is no one to pass it on to: as before
    return Wake.PASS_ON


class RosterKeeper(Service):
    """Reads the roster every ``interval`` seconds (a third of a lease: the
    heartbeats it reads are written that often), and at once when ``wakeup`` is set:
    a worker that registers, begins draining or stops says so on the work channel
    (``ROSTER_CHANGED``). A failed read keeps the last one."""

    name = "roster"

    def __init__(
        self,
        *,
        store: WorkerStore,
        roster: Roster,
        interval: float,
        wakeup: Wakeup,
        on_failure: Callable[[str, BaseException], None],
    ) -> None:
        super().__init__(on_failure)
        self._store = store
        self._roster = roster
        self._interval = interval
        self._wakeup = wakeup

    async def run_once(self) -> None:
        """Read once. Raises ``StoreError`` when the read fails."""
        if self._roster.update(await self._store.workers_peers()):
            ids = [peer.worker_id for peer in self._roster.peers]
            log.info("roster: %d live workers (%s)", len(ids), ", ".join(ids))

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except StoreError as exc:
                log.warning("roster read failed (kept the last one): %s", exc)
            await self._wakeup.sleep(self._interval)
