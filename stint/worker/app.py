"""One worker process: claimer, lease keeper, listener and slots, with one lifecycle.

The claimer fills free slots with leased sessions; the lease keeper renews all
leases in one statement every lease/3 on a connection of its own and cancels
slots whose lease was lost; the listener turns NOTIFY into wake-ups (polling
stays the truth). SIGTERM drains: stop claiming, let turns finish within the
budget, then hand back what remains so another worker resumes it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from importlib.metadata import version as package_version
from uuid import UUID

from stint.config.settings import Settings
from stint.store.config import ROLE_CLAIM, ROLE_LEASE, ROLE_LISTEN, ROLE_SLOT, StoreConfig
from stint.store.errors import LeaseLost, StoreError
from stint.store.listen import Listener
from stint.store.models import Claim
from stint.store.pool import Pool, open_pool
from stint.store.runtime import RuntimeStore
from stint.worker.backoff import Backoff
from stint.worker.cancelling import cancel_and_wait
from stint.worker.failpoints import failpoint
from stint.worker.harness import Harness
from stint.worker.health import HealthState
from stint.worker.runner import Held, Limits, SessionRunner
from stint.worker.telemetry import SPAN_CLAIM, span

__all__ = ["Worker", "new_worker_id"]

log = logging.getLogger("stint.worker")


def new_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Worker:
    """Build with settings, a resolved store config and a harness; ``await run()``."""

    def __init__(
        self, settings: Settings, config: StoreConfig, harness: Harness, *, worker_id: str
    ) -> None:
        self.settings = settings
        self.config = config
        self.id = worker_id
        self.held: dict[UUID, Held] = {}
        self._harness = harness
        self._wake = asyncio.Event()
        self._renew_now = asyncio.Event()
        self._stop = asyncio.Event()
        self._skip_drain = asyncio.Event()
        self._pools: list[Pool] = []
        self._last_renewal = 0.0
        self._store: RuntimeStore | None = None
        self.failure: BaseException | None = None
        self.health = HealthState(lease_seconds=settings.lease_seconds)

    # -- lifecycle -----------------------------------------------------------

    def request_stop(self) -> None:
        """First call: drain. Second call: skip the drain wait."""
        if self._stop.is_set():
            self._skip_drain.set()
        self._stop.set()
        self.health.draining = True

    async def run(self) -> int:
        """Run until stopped; returns the process exit code."""
        store = await self._open_store()
        s = self.settings
        await store.workers_register(
            worker_id=self.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=package_version("stint"),
            pins=s.pins,
            slots=s.slots,
        )
        self._last_renewal = asyncio.get_running_loop().time()
        self.health.renewed()
        log.info(
            "worker %s running: %d slots, lease %.1fs, pins %s",
            self.id,
            s.slots,
            s.lease_seconds,
            s.pins or "none",
        )
        services = [
            asyncio.create_task(self._service("claimer", self._claim_loop), name="claimer"),
            asyncio.create_task(self._service("lease keeper", self._lease_loop), name="lease"),
            asyncio.create_task(self._service("listener", self._listen_loop), name="listener"),
        ]
        try:
            await self._stop.wait()
            await cancel_and_wait(services[:1])  # the claimer: no new claims
            await self._drain(store)
        finally:
            await cancel_and_wait(services)
            try:
                await store.workers_set_state(worker_id=self.id, pid=os.getpid(), state="stopped")
            except StoreError as exc:
                log.warning("could not mark worker stopped: %s", exc)
            for pool in self._pools:
                await pool.close()
        log.info("worker %s stopped", self.id)
        return 1 if self.failure else 0

    async def _open_store(self) -> RuntimeStore:
        s = self.settings
        slots = await open_pool(
            self.config,
            ROLE_SLOT,
            min_size=s.slot_pool_min_size,
            max_size=s.slot_pool_size,
        )
        self._pools.append(slots)
        claim = await open_pool(self.config, ROLE_CLAIM, min_size=1, max_size=1)
        self._pools.append(claim)
        lease = await open_pool(self.config, ROLE_LEASE, min_size=1, max_size=1)
        self._pools.append(lease)
        self._store = RuntimeStore(self.config, slots=slots, claim=claim, lease=lease)
        return self._store

    @property
    def store(self) -> RuntimeStore:
        assert self._store is not None, "worker not started"
        return self._store

    async def _service(self, name: str, loop_fn: Callable[[], Awaitable[None]]) -> None:
        """Run one service; if it dies, the whole worker stops loudly."""
        try:
            await loop_fn()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            log.exception("%s failed; stopping the worker", name)
            self.failure = exc
            self.request_stop()

    # -- fencing -------------------------------------------------------------

    def may_write(self) -> bool:
        """False once leases went unrenewed for a whole lease: we fence ourselves."""
        elapsed = asyncio.get_running_loop().time() - self._last_renewal
        return elapsed < self.settings.lease_seconds

    # -- claimer -------------------------------------------------------------

    async def _claim_loop(self) -> None:
        s = self.settings
        runner = SessionRunner(
            store=self.store,
            harness=self._harness,
            limits=Limits(
                turn_timeout=s.turn_timeout,
                max_turns_per_claim=s.max_turns_per_claim,
                max_claim_seconds=s.max_claim_seconds,
            ),
            may_write=self.may_write,
            stopping=self._stop.is_set,
        )
        backoff = Backoff()
        while not self._stop.is_set():
            free = s.slots - len(self.held)
            if free > 0 and self.may_write():
                try:
                    with span(SPAN_CLAIM, worker_id=self.id, free_slots=free) as current:
                        claims = await self.store.sessions_claim(
                            owner=self.id, pins=s.pins, limit=free, lease_seconds=s.lease_seconds
                        )
                        current.set_attribute("claimed", len(claims))
                except StoreError as exc:
                    log.warning("claim failed: %s", exc)
                    await self._sleep_or_wake(backoff.next_delay())
                    continue
                backoff.reset()
                if claims:
                    failpoint("after_claim")
                for claim in claims:
                    self._start_slot(runner, claim)
            await self._sleep_or_wake(s.poll_interval)

    def _start_slot(self, runner: SessionRunner, claim: Claim) -> None:
        held = Held(claim)
        self.held[claim.session_id] = held
        held.task = asyncio.create_task(runner.run(held), name=f"slot-{claim.session_id}")
        held.task.add_done_callback(lambda _t: self._slot_done(held))

    def _slot_done(self, held: Held) -> None:
        if self.held.get(held.claim.session_id) is held:
            del self.held[held.claim.session_id]
        self._wake.set()

    async def _sleep_or_wake(self, seconds: float) -> None:
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
        # that races with the event (cpython#86296), and the worker would not stop.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        self._wake.clear()

    # -- lease keeper --------------------------------------------------------

    async def _lease_loop(self) -> None:
        s = self.settings
        loop = asyncio.get_running_loop()
        interval = s.lease_seconds / 3
        while True:
            # A control NOTIFY renews at once: the renewal also reads the request.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._renew_now.wait()
            self._renew_now.clear()
            snapshot = list(self.held.values())
            sent_at = loop.time()
            try:
                kept = await self.store.leases_renew(
                    owner=self.id,
                    pid=os.getpid(),
                    claims=[h.claim for h in snapshot],
                    lease_seconds=s.lease_seconds,
                )
            except StoreError as exc:
                log.warning("lease renewal failed: %s", exc)
                self.health.renewal_failed()
                continue
            self._last_renewal = sent_at
            self.health.renewed()
            log.debug("renewed %d of %d leases", len(kept), len(snapshot))
            for held in snapshot:
                if self.held.get(held.claim.session_id) is not held:
                    continue  # finished meanwhile
                if held.claim.session_id not in kept:
                    if not held.releasing:  # a release can commit before this renewal
                        self._lose(held)
                    continue
                control = kept[held.claim.session_id]
                if control is not None and control != held.control:
                    log.info("session %s: %s requested", held.claim.session_id, control.action)
                    held.stop_turn(control)

    def _lose(self, held: Held) -> None:
        log.warning("session %s: lease lost, cancelling its slot", held.claim.session_id)
        held.lost = True
        if held.task is not None:
            held.task.cancel()

    # -- listener ------------------------------------------------------------

    async def _listen_loop(self) -> None:
        backoff = Backoff()
        while True:
            try:
                channels = [self.config.work_channel, self.config.control_channel]
                async with Listener(self.config, channels=channels, role=ROLE_LISTEN) as listener:
                    backoff.reset()
                    self._wake.set()  # catch up on anything missed while disconnected
                    self._renew_now.set()
                    async for channel, payload in listener.notifications():
                        log.debug("notification on %s: %s", channel, payload)
                        if channel == self.config.work_channel:
                            self._wake.set()
                        elif any(str(sid) == payload for sid in self.held):
                            self._renew_now.set()
            except StoreError as exc:
                log.warning("listener lost its connection: %s", exc)
                await asyncio.sleep(backoff.next_delay())

    # -- drain ---------------------------------------------------------------

    async def _drain(self, store: RuntimeStore) -> None:
        s = self.settings
        await self._set_state(store, "draining")
        tasks = [h.task for h in self.held.values() if h.task is not None]
        if tasks and not self._skip_drain.is_set():
            log.info("draining: waiting up to %.1fs for %d turns", s.drain_seconds, len(tasks))
            finished = asyncio.create_task(asyncio.wait(tasks))
            skip = asyncio.create_task(self._skip_drain.wait())
            await asyncio.wait(
                [finished, skip], timeout=s.drain_seconds, return_when=asyncio.FIRST_COMPLETED
            )
            finished.cancel()
            skip.cancel()
        remaining = [h for h in self.held.values() if h.task is not None and not h.task.done()]
        await cancel_and_wait(h.task for h in remaining if h.task is not None)
        for held in remaining:
            if held.lost:
                continue
            try:
                requeued = await store.sessions_release(
                    held.claim, turn_id=held.turn_id, reason="drain"
                )
                log.info(
                    "session %s handed back (turn requeued: %s)", held.claim.session_id, requeued
                )
            except LeaseLost:
                pass
            except StoreError as exc:
                log.warning(
                    "session %s: hand-back failed, left to lease expiry (%s)",
                    held.claim.session_id,
                    exc,
                )

    async def _set_state(self, store: RuntimeStore, state: str) -> None:
        try:
            await store.workers_set_state(worker_id=self.id, pid=os.getpid(), state=state)
        except StoreError as exc:
            log.warning("could not mark worker %s: %s", state, exc)
