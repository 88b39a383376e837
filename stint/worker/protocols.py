"""What the worker needs from its surroundings, as Protocols.

The worker's services and slots talk to PostgreSQL only through
``WorkerStore`` (implemented by ``stint.store.worker_store.SqlWorkerStore``) and hear
notifications only through a ``NotificationSource``. Keeping that seam narrow
lets the lifecycle, lease-loss, control and drain logic be unit-tested against
an in-memory store in milliseconds, besides the tests with real processes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol
from uuid import UUID

from stint.store.batch import Late
from stint.store.children import ChildStore
from stint.store.conversation import ConversationStore
from stint.store.fenced import EventSpec
from stint.store.models import Claim, ControlRequest, FinishResult, StepRecord, Work, WorkerPeer
from stint.store.quotas import QuotaStore
from stint.store.vocabulary import StepKind, StepStatus, TurnStatus, WorkerState
from stint.store.waits import WaitStore

__all__ = ["NotificationSource", "Notifications", "WorkerStore"]


class WorkerStore(Protocol):
    """Every statement a worker runs. Fenced writes raise ``LeaseLost`` and write
    nothing when the claim's owner and epoch no longer match the session row."""

    @property
    def conversation(self) -> ConversationStore:
        """Conversation memory, for harnesses that keep one (the agents harness)."""
        ...

    @property
    def quotas(self) -> QuotaStore:
        """Provider quota reservations, for harnesses that call a provider."""
        ...

    @property
    def children(self) -> ChildStore:
        """Child sessions, for ``TurnContext.spawn`` and the reports of their ends."""
        ...

    @property
    def waits(self) -> WaitStore:
        """Durable waits (timers, signals, children), for ``TurnContext``'s waits."""
        ...

    async def workers_register(
        self,
        *,
        worker_id: str,
        host: str,
        pid: int,
        version: str,
        pins: Sequence[str],
        slots: int,
        lease_seconds: float,
    ) -> None: ...

    async def workers_set_state(self, *, worker_id: str, pid: int, state: WorkerState) -> None: ...

    async def workers_peers(self) -> list[WorkerPeer]: ...

    async def work_nudge(self) -> None: ...

    async def turns_claim(
        self, *, owner: str, pins: Sequence[str], limit: int | Late[int], lease_seconds: float
    ) -> list[Work]: ...

    async def leases_renew(
        self, *, owner: str, pid: int, claims: Sequence[Claim], lease_seconds: float
    ) -> dict[UUID, ControlRequest | None]: ...

    async def steps_for_turn(self, claim: Claim, turn_id: UUID) -> dict[str, StepRecord]: ...

    async def steps_start(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        step_key: str,
        kind: StepKind,
        digest: str,
        events: Sequence[EventSpec] = (),
    ) -> None: ...

    async def steps_finish(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        step_key: str,
        status: StepStatus,
        result: Any,
        events: Sequence[EventSpec] = (),
    ) -> None: ...

    async def events_append(
        self, claim: Claim, *, turn_id: UUID | None, events: Sequence[EventSpec]
    ) -> int: ...

    async def turns_finish(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        status: TurnStatus,
        output: Any,
        error: str | None,
        events: Sequence[EventSpec],
        release: bool | Late[bool],
        reason: str | None = None,
        claim_next: bool | Late[bool] = False,
        pins: Sequence[str] = (),
        lease_seconds: float = 30.0,
    ) -> FinishResult: ...

    async def turns_park(
        self, claim: Claim, *, turn_id: UUID, step_key: str, digest: str, question: Any
    ) -> ControlRequest | None: ...

    async def turns_defer(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        scope: str,
        wait_seconds: float,
        waited_seconds: float = 0.0,
    ) -> ControlRequest | None: ...

    async def sessions_release(
        self, claim: Claim, *, turn_id: UUID | None = None, reason: str = "released"
    ) -> bool: ...


class Notifications(Protocol):
    """A live subscription: each notification as (channel, payload) until the
    connection is lost (``ConnectionFailed``)."""

    def notifications(self) -> AsyncIterator[tuple[str, str]]: ...


class NotificationSource(Protocol):
    """Opens a subscription to the work and control channels (LISTEN)."""

    def __call__(self) -> AbstractAsyncContextManager[Notifications]: ...
