"""The supervisor: one worker process's lifecycle around its three services.

It registers the worker, starts the lease keeper, the listener and the
claimer, and waits for a stop request. SIGTERM drains: stop claiming, let
running turns finish within the drain budget, then hand back what remains
(each turn back to queued with its committed steps kept, each lease released)
so another worker resumes it at once instead of waiting for the lease to
expire. A second request skips the wait. If any service dies, the worker
stops loudly and exits non-zero.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stint.store.backoff import Backoff
from stint.store.errors import (
    ConnectionFailed,
    ConnectionRejected,
    LeaseLost,
    QueryTimeout,
    StoreError,
    WorkerIdInUse,
)
from stint.store.vocabulary import WorkerState
from stint.worker.cancelling import cancel_and_wait
from stint.worker.claimer import Claimer
from stint.worker.harness import Harness
from stint.worker.health import HealthState
from stint.worker.lease_keeper import LeaseKeeper
from stint.worker.listener import Listener
from stint.worker.protocols import NotificationSource, WorkerStore
from stint.worker.roster import Roster, RosterKeeper
from stint.worker.runner import Limits, SessionRunner
from stint.worker.sampler import Sampler, SampleSource
from stint.worker.service import Service, Wakeup
from stint.worker.slots import Held, Slots
from stint.worker.telemetry import record_handed_back

__all__ = ["Identity", "Supervisor", "WorkerPlan", "new_worker_id"]

log = logging.getLogger("stint.worker")


def new_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Identity:
    """Who this worker is, as its row in ``workers`` records it."""

    worker_id: str
    version: str
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)


@dataclass(frozen=True)
class WorkerPlan:
    """The settings the supervisor and its services run with."""

    slots: int
    pins: Sequence[str]
    lease_seconds: float
    poll_interval: float
    drain_seconds: float
    work_channel: str
    limits: Limits
    sample_seconds: float = 0.0  # the elected queue sampler's interval; 0: not a candidate
    reconnect_max: float = 1.0  # the longest pause before reconnecting or claiming again


FailureHandler = Callable[[str, BaseException], None]
ChoreFactory = Callable[[FailureHandler], Service]
"""Builds a periodic chore (retention) as a service that reports its death here."""


class Supervisor:
    """Build with a store, a notification source and a harness; ``await run()``."""

    def __init__(
        self,
        plan: WorkerPlan,
        *,
        store: WorkerStore,
        subscribe: NotificationSource,
        harness: Harness,
        identity: Identity,
        chores: Sequence[ChoreFactory] = (),
        stats: SampleSource | None = None,
        health: HealthState | None = None,
    ) -> None:
        self.plan = plan
        self.identity = identity
        self.failure: BaseException | None = None
        self._chores = list(chores)
        self._store = store
        self._subscribe = subscribe
        self._harness = harness
        self._claim_wakeup = Wakeup()
        self._renew_wakeup = Wakeup()
        self.slots = Slots(plan.slots, claim_wakeup=self._claim_wakeup)
        self._stop = asyncio.Event()
        self._skip_drain = asyncio.Event()
        self.health = health or HealthState(lease_seconds=plan.lease_seconds)
        self.lease_keeper: LeaseKeeper | None = None
        self._stats = stats
        self.sampler: Sampler | None = None

    @property
    def id(self) -> str:
        return self.identity.worker_id

    def request_stop(self) -> None:
        """First call: drain. Second call: skip the drain wait."""
        if self._stop.is_set():
            self._skip_drain.set()
        self._stop.set()
        self.health.draining = True

    def _service_failed(self, name: str, exc: BaseException) -> None:
        self.failure = exc
        self.request_stop()

    async def run(self) -> int:
        """Run until stopped; returns the process exit code."""
        plan, me = self.plan, self.identity
        if not await self._register():
            return 0  # stopped before it could register: nothing held, nothing to drain
        self.health.renewed()  # the database answered the registration
        self.health.serving = True
        log.info(
            "worker %s running: %d slots, lease %.1fs, pins %s",
            me.worker_id,
            plan.slots,
            plan.lease_seconds,
            list(plan.pins) or "none",
        )
        keeper = LeaseKeeper(
            store=self._store,
            slots=self.slots,
            owner=me.worker_id,
            pid=me.pid,
            lease_seconds=plan.lease_seconds,
            wakeup=self._renew_wakeup,
            health=self.health,
            on_failure=self._service_failed,
        )
        self.lease_keeper = keeper
        runner = SessionRunner(
            store=self._store,
            harness=self._harness,
            limits=plan.limits,
            may_write=keeper.may_write,
            stopping=self._stop.is_set,
            switch=self.slots.switch,
            pins=plan.pins,
            lease_seconds=plan.lease_seconds,
        )
        claimer = Claimer(
            store=self._store,
            slots=self.slots,
            run_slot=runner.run,
            owner=me.worker_id,
            pins=plan.pins,
            lease_seconds=plan.lease_seconds,
            poll_interval=plan.poll_interval,
            reconnect_max=plan.reconnect_max,
            may_write=keeper.may_write,
            wakeup=self._claim_wakeup,
            on_failure=self._service_failed,
        )
        roster = Roster(me.worker_id, plan.pins)
        roster_wakeup = Wakeup()
        listener = Listener(
            subscribe=self._subscribe,
            work_channel=plan.work_channel,
            slots=self.slots,
            claim_wakeup=self._claim_wakeup,
            renew_wakeup=self._renew_wakeup,
            roster=roster,
            roster_wakeup=roster_wakeup,
            claiming=claimer.claiming,
            store=self._store,
            reconnect_max=plan.reconnect_max,
            on_failure=self._service_failed,
        )
        services: list[Service] = [
            claimer,
            keeper,
            listener,
            RosterKeeper(
                store=self._store,
                roster=roster,
                interval=plan.lease_seconds / 3,
                wakeup=roster_wakeup,
                on_failure=self._service_failed,
            ),
            *(make(self._service_failed) for make in self._chores),
        ]
        if self._stats is not None and plan.sample_seconds > 0:
            self.sampler = Sampler(
                store=self._stats,
                holder=me.worker_id,
                interval=plan.sample_seconds,
                on_failure=self._service_failed,
            )
            services.append(self.sampler)
        for service in services:
            service.start()
        try:
            await self._stop.wait()
            await claimer.stop()  # no new claims
            if self.sampler is not None:  # a draining worker samples no more
                await self.sampler.stop()
                await self.sampler.resign()
            await self._drain()
        finally:
            for service in services:
                await service.stop()
            await self._set_state(WorkerState.STOPPED)
        log.info("worker %s stopped", me.worker_id)
        return 1 if self.failure else 0

    async def _register(self) -> bool:
        """Register; if a live worker holds this id, wait for its heartbeat to lapse.
        False when a stop came first.

        A worker restarted under a fixed id (a pod name) finds its killed
        predecessor's row still fresh for up to one lease; a second live process
        with the same id keeps it fresh forever and is refused once that lease
        has passed, because two processes with one id would renew (and so
        steal) each other's leases. A database that stops answering meanwhile
        is waited for (the outage may have begun as the worker started).
        """
        plan, me = self.plan, self.identity
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        backoff = Backoff(cap=plan.reconnect_max)
        while True:
            if self._stop.is_set():
                return False
            try:
                await self._store.workers_register(
                    worker_id=me.worker_id,
                    host=me.host,
                    pid=me.pid,
                    version=me.version,
                    pins=plan.pins,
                    slots=plan.slots,
                    lease_seconds=plan.lease_seconds,
                )
                return True
            except (ConnectionFailed, QueryTimeout) as exc:
                if isinstance(exc, ConnectionRejected):
                    raise
                self.health.renewal_failed()
                log.warning("registration failed, trying again: %s", exc)
                await asyncio.sleep(backoff.next_delay())
            except WorkerIdInUse as exc:
                held = exc.context
                if deadline is None:
                    wait = float(held.get("lease_seconds") or plan.lease_seconds)
                    deadline = loop.time() + wait + plan.poll_interval
                    log.warning(
                        "worker id %s is in use by a live worker (host %s, pid %s, heartbeat "
                        "%ss ago); waiting up to %.1fs for its heartbeat to lapse",
                        me.worker_id,
                        held.get("host"),
                        held.get("pid"),
                        held.get("heartbeat_age"),
                        wait,
                    )
                elif loop.time() >= deadline:
                    raise
                await asyncio.sleep(plan.poll_interval)

    async def _drain(self) -> None:
        await self._set_state(WorkerState.DRAINING)
        tasks = [h.task for h in self.slots.running() if h.task is not None]
        if tasks and not self._skip_drain.is_set():
            budget = self.plan.drain_seconds
            log.info("draining: waiting up to %.1fs for %d turns", budget, len(tasks))
            finished = asyncio.create_task(asyncio.wait(tasks))
            skip = asyncio.create_task(self._skip_drain.wait())
            await asyncio.wait(
                [finished, skip], timeout=budget, return_when=asyncio.FIRST_COMPLETED
            )
            finished.cancel()
            skip.cancel()
        remaining = self.slots.running()
        await cancel_and_wait(h.task for h in remaining if h.task is not None)
        for held in remaining:
            if not held.lost:
                await self._hand_back(held)

    async def _hand_back(self, held: Held) -> None:
        sid = held.claim.session_id
        try:
            requeued = await self._store.sessions_release(
                held.claim, turn_id=held.turn_id, reason="drain"
            )
            log.info("session %s handed back (turn requeued: %s)", sid, requeued)
            if requeued:
                record_handed_back("drain")
        except LeaseLost:
            pass
        except StoreError as exc:
            log.warning("session %s: hand-back failed, left to lease expiry (%s)", sid, exc)

    async def _set_state(self, state: WorkerState) -> None:
        try:
            await self._store.workers_set_state(
                worker_id=self.identity.worker_id, pid=self.identity.pid, state=state
            )
        except StoreError as exc:
            log.warning("could not mark worker %s: %s", state, exc)
