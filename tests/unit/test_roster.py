"""Which worker a session's work notification wakes (stint/worker/roster.py), and
what the listener does with it: wake its claimer, let it pass, or pass it on to
every worker when it cannot claim now. Against the in-memory store.

End to end with real workers and PostgreSQL: tests/acceptance/test_wake_routing.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from stint.store.errors import ConnectionFailed
from stint.store.models import ROSTER_CHANGED, WorkerPeer
from stint.worker.roster import Roster, RosterKeeper, Wake, route
from stint.worker.service import Wakeup
from tests.polling import wait_until
from tests.unit.fake_worker_store import FakeWorkerStore
from tests.unit.test_worker_services import OWNER, WORK, Rig

OTHER = "worker-other"


def _rosters(*peers: WorkerPeer) -> dict[str, Roster]:
    """Each peer's own roster, every one having read the same list."""
    rosters = {p.worker_id: Roster(p.worker_id, p.pins) for p in peers}
    for roster in rosters.values():
        roster.update(peers)
    return rosters


def _session_picked_by(roster: Roster, wanted: bool, pin: str = "") -> str:
    """A payload naming a fresh session that ``roster`` picks (or not)."""
    while True:
        payload = f"{uuid.uuid4()} {pin}".strip()
        if roster.picks_me(payload) is wanted:
            return payload


def _failed(name: str, exc: BaseException) -> None:
    raise AssertionError(f"service {name} failed: {exc!r}")


def test_exactly_one_worker_is_picked_for_each_session() -> None:
    peers = [WorkerPeer(f"w{n}", ()) for n in range(3)]
    rosters = _rosters(*reversed(peers))  # read order does not matter
    picked: dict[str, int] = {p.worker_id: 0 for p in peers}
    for _ in range(300):
        payload = str(uuid.uuid4())
        takers = [wid for wid, roster in rosters.items() if roster.picks_me(payload)]
        assert len(takers) == 1, (payload, takers)
        picked[takers[0]] += 1
    assert all(count > 0 for count in picked.values()), picked


def test_a_pinned_session_picks_among_the_workers_that_accept_its_pin() -> None:
    gpu = WorkerPeer("w-gpu", ("gpu",))
    plain = [WorkerPeer("w-a", ()), WorkerPeer("w-b", ("cpu",))]
    rosters = _rosters(gpu, *plain)
    for _ in range(50):
        payload = f"{uuid.uuid4()} gpu"
        assert rosters["w-gpu"].picks_me(payload)
        assert not any(rosters[p.worker_id].picks_me(payload) for p in plain)
    # A pin no live worker accepts: every worker tries (the claim decides).
    orphan = f"{uuid.uuid4()} tpu"
    assert all(roster.picks_me(orphan) for roster in rosters.values())


def test_a_notification_naming_no_session_is_everyones() -> None:
    rosters = _rosters(WorkerPeer("w0", ()), WorkerPeer("w1", ()))
    for payload in ("", "not-a-uuid", "12345 gpu"):
        assert all(roster.picks_me(payload) for roster in rosters.values()), payload


def test_alone_or_unread_a_worker_takes_every_notification() -> None:
    roster = Roster(OWNER, [])
    assert all(roster.picks_me(str(uuid.uuid4())) for _ in range(20))
    assert not roster.update([WorkerPeer(OWNER, ())])  # itself only: no change
    assert roster.update([WorkerPeer(OTHER, ())])  # a read that missed this worker
    assert [p.worker_id for p in roster.peers] == sorted([OWNER, OTHER])


async def test_the_keeper_reads_the_roster_and_keeps_the_last_when_a_read_fails() -> None:
    store = FakeWorkerStore()
    roster = Roster(OWNER, [])
    keeper = RosterKeeper(
        store=store, roster=roster, interval=3600, wakeup=Wakeup(), on_failure=_failed
    )
    store.peers = [WorkerPeer(OTHER, ()), WorkerPeer(OWNER, ())]
    await keeper.run_once()
    assert [p.worker_id for p in roster.peers] == sorted([OWNER, OTHER])
    store.peers_error = ConnectionFailed("gone")
    keeper.start()  # its loop logs the failure and carries on
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert keeper.running
    await keeper.stop()
    assert [p.worker_id for p in roster.peers] == sorted([OWNER, OTHER])


# -- the routing as a model: every fleet, every notification -----------------


@dataclass(frozen=True)
class Member:
    """A worker of the modelled fleet. ``hears``: it reads its notifications (false: paused
    or dead but still in everyone's roster, its heartbeat not yet lapsed)."""

    peer: WorkerPeer
    free: int
    claiming: bool
    hears: bool

    def takes(self, pin: str) -> bool:
        """A claim of this worker's would take a session with this pin."""
        return self.free > 0 and self.claiming and (not pin or pin in self.peer.pins)


_PINS = ("gpu", "cpu")


@st.composite
def _fleets(draw: st.DrawFn) -> list[Member]:
    ids = draw(
        st.lists(st.text("abcxyz", min_size=1, max_size=3), min_size=1, max_size=5, unique=True)
    )
    return [
        Member(
            WorkerPeer(worker_id, tuple(draw(st.lists(st.sampled_from(_PINS), unique=True)))),
            free=draw(st.integers(0, 2)),
            claiming=draw(st.booleans()),
            hears=draw(st.booleans()),
        )
        for worker_id in ids
    ]


@settings(max_examples=400, deadline=None)
@given(fleet=_fleets(), session=st.uuids(), pin=st.sampled_from(("", *_PINS, "tpu")))
def test_a_named_notification_is_acted_on_by_one_worker_and_reaches_a_free_one(
    fleet: list[Member], session: UUID, pin: str
) -> None:
    """Every worker's roster is the fleet (views agree). Then at most one worker acts on a
    notification naming a session (claims, or passes it on), unless no worker accepts its
    pin (then all try, as before); and if a worker that could take the session exists and
    the picked one reads its notifications, some worker takes it at once: the picked one,
    or one the pass-on woke. Only a picked worker that hears nothing leaves it to the polls."""
    payload = f"{session} {pin}".strip()
    rosters = {m.peer.worker_id: Roster(m.peer.worker_id, m.peer.pins) for m in fleet}
    for roster in rosters.values():
        roster.update(m.peer for m in fleet)
    decided = {
        m.peer.worker_id: route(
            rosters[m.peer.worker_id], payload, free=m.free, claiming=m.claiming
        )
        for m in fleet
    }
    acting = [wid for wid, wake in decided.items() if wake is not Wake.LET_PASS]
    picked = [m for m in fleet if rosters[m.peer.worker_id].picks_me(payload)]
    nobody_accepts = bool(pin) and not any(pin in m.peer.pins for m in fleet)
    assert len(acting) == (len(fleet) if nobody_accepts else 1)
    assert len(picked) == len(acting)
    hearing = [m for m in fleet if m.hears]
    woken = {m.peer.worker_id for m in hearing if decided[m.peer.worker_id] is Wake.CLAIM}
    if any(decided[m.peer.worker_id] is Wake.PASS_ON for m in hearing):
        woken |= {
            m.peer.worker_id
            for m in hearing
            if route(rosters[m.peer.worker_id], "", free=m.free, claiming=m.claiming) is Wake.CLAIM
        }
    took = [m for m in hearing if m.peer.worker_id in woken and m.takes(pin)]
    if any(m.takes(pin) for m in hearing) and any(m.hears for m in picked):
        assert took, (decided, woken)
    if not nobody_accepts:
        assert len(took) <= 1 or any(decided[m.peer.worker_id] is Wake.PASS_ON for m in hearing)


async def test_a_roster_change_has_the_roster_read_at_once() -> None:
    """A worker registered, began draining or stopped: every listener hears
    ``ROSTER_CHANGED`` and its keeper reads again without waiting out its interval."""
    rig = Rig(FakeWorkerStore())
    keeper = RosterKeeper(
        store=rig.store,
        roster=rig.roster,
        interval=3600,
        wakeup=rig.roster_wakeup,
        on_failure=_failed,
    )
    keeper.start()
    await wait_until(_reads(rig.store, 1), what="the first read")
    rig.store.peers = [WorkerPeer(OTHER, ())]
    rig.listener.run_once(WORK, ROSTER_CHANGED)
    await wait_until(_reads(rig.store, 2), what="the read the change asked for")
    await keeper.stop()
    assert [p.worker_id for p in rig.roster.peers] == sorted([OWNER, OTHER])
    assert not await _woken(rig)  # not a session: the claimer sleeps on


def _reads(store: FakeWorkerStore, count: int) -> Callable[[], Awaitable[bool]]:
    async def read() -> bool:
        return store.peer_reads >= count

    return read


def _two_worker_rig(slots: int = 2) -> Rig:
    rig = Rig(FakeWorkerStore(), slots=slots)
    rig.roster.update([WorkerPeer(OWNER, ()), WorkerPeer(OTHER, ())])
    return rig


def _settled(rig: Rig) -> Callable[[], Awaitable[bool]]:
    async def settled() -> bool:
        return not rig.listener.passing_on

    return settled


async def _woken(rig: Rig) -> bool:
    """Whether the claim wake-up is set (consumes it)."""
    sleeper = asyncio.create_task(rig.claim_wakeup.sleep(3600))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    woken = sleeper.done()
    sleeper.cancel()
    await asyncio.gather(sleeper, return_exceptions=True)
    return woken


async def test_the_listener_wakes_its_claimer_only_for_sessions_picked_for_it() -> None:
    rig = _two_worker_rig()
    rig.listener.run_once(WORK, _session_picked_by(rig.roster, wanted=False))
    assert not await _woken(rig)
    rig.listener.run_once(WORK, _session_picked_by(rig.roster, wanted=True))
    assert await _woken(rig)
    rig.listener.run_once(WORK, "")
    assert await _woken(rig)
    assert rig.store.nudges == 0


async def test_picked_with_every_slot_busy_the_listener_passes_it_on_once_per_burst() -> None:
    rig = _two_worker_rig(slots=1)
    sid: UUID = rig.store.add_session({"gate": "busy"})
    assert await rig.claimer.run_once() == 1
    assert rig.slots.free == 0
    rig.store.nudge_gate = asyncio.Event()
    for _ in range(2):  # before the first nudge is sent: it covers both
        rig.listener.run_once(WORK, _session_picked_by(rig.roster, wanted=True))
    await asyncio.sleep(0)  # the nudge is on its way (held at the gate)
    for _ in range(3):  # while it is: one more nudge follows it for all three
        rig.listener.run_once(WORK, _session_picked_by(rig.roster, wanted=True))
    rig.listener.run_once(WORK, _session_picked_by(rig.roster, wanted=False))  # not ours
    rig.store.nudge_gate.set()
    await wait_until(_settled(rig), what="the nudges were sent")
    assert (rig.store.nudges, rig.listener.relayed) == (2, 2)
    assert not await _woken(rig)
    rig.harness.gates["busy"].set()
    await rig.settle(sid)


async def test_a_stopping_claimer_passes_its_sessions_on() -> None:
    rig = _two_worker_rig()
    rig.claimer.start()
    await rig.claimer.stop()
    rig.listener.run_once(WORK, _session_picked_by(rig.roster, wanted=True))
    await wait_until(_settled(rig), what="the nudge was sent")
    assert rig.store.nudges == 1


async def test_a_failed_nudge_is_logged_and_left_to_the_polls() -> None:
    rig = _two_worker_rig(slots=1)
    rig.store.add_session({"gate": "busy"})
    await rig.claimer.run_once()
    rig.store.nudge_error = ConnectionFailed("gone")
    rig.listener.run_once(WORK, _session_picked_by(rig.roster, wanted=True))
    assert rig.listener.passing_on
    await wait_until(_settled(rig), what="the nudge failed")
    assert (rig.store.nudges, rig.listener.relayed) == (0, 0)
    rig.harness.gates["busy"].set()
    await rig.settle_all()


def test_alone_a_busy_worker_passes_nothing_on() -> None:
    """No one to pass it to: a nudge would only wake this worker again."""
    roster = Roster(OWNER, [])
    payload = str(uuid.uuid4())
    assert route(roster, payload, free=0, claiming=True) is Wake.CLAIM
    assert route(roster, payload, free=1, claiming=False) is Wake.CLAIM
    roster.update([WorkerPeer(OTHER, ())])
    mine = _session_picked_by(roster, wanted=True)
    assert route(roster, mine, free=0, claiming=True) is Wake.PASS_ON


async def test_a_slot_whose_finish_found_nothing_wakes_the_claimer_only_when_owed() -> None:
    """A slot ends after its finish claimed the next session in the same statement and
    found none: a claim now would find none either, so the claimer sleeps on. But a
    claimer woken while every slot was busy (a notification it could not act on) is owed
    a wake-up, and the next slot to end gives it."""
    rig = Rig(FakeWorkerStore(), slots=1)
    first = rig.store.add_session({"gate": "first"})
    assert await rig.claimer.run_once() == 1
    rig.harness.gates["first"].set()
    await rig.settle(first)
    assert rig.slots.free == 1
    assert not await _woken(rig)

    second = rig.store.add_session({"gate": "second"})
    assert await rig.claimer.run_once() == 1
    assert await rig.claimer.run_once() == 0  # woken with every slot busy
    rig.harness.gates["second"].set()
    await rig.settle(second)
    assert await _woken(rig)
