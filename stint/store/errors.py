"""The store's error tree.

Every failure that leaves ``store`` is one of these. Driver (psycopg) errors are
translated here and nowhere else, with the original kept as ``__cause__``. Each
class's docstring is its default message; messages never contain a database
URL or a password.
"""

from __future__ import annotations

from typing import Any

from stint.errors import StintError
from stint.store.models import ControlRequest

__all__ = [
    "AdmissionRefused",
    "AnswerConflict",
    "ChildRefused",
    "ConfigError",
    "ConnectionFailed",
    "ConnectionRejected",
    "DatabaseError",
    "Deadlocked",
    "EmbeddedPostgresError",
    "IdempotencyConflict",
    "InvalidInput",
    "LeaseLost",
    "LockTimeout",
    "MigrationChecksumMismatch",
    "MigrationError",
    "NameTaken",
    "NoOpenQuestion",
    "PostgresBinariesNotFound",
    "QueryTimeout",
    "QueueFull",
    "QuotaScopeUnknown",
    "SessionBusy",
    "SessionLimitReached",
    "StoreError",
    "TurnStopRequested",
    "UnknownSchedule",
    "UnknownSession",
    "UnknownTurn",
    "UnknownWebhook",
    "UnstorableJson",
    "WorkerIdInUse",
]


class StoreError(StintError):
    """A store operation failed."""

    def __init__(self, message: str | None = None, **context: Any) -> None:
        self.message = message or (type(self).__doc__ or "").strip().splitlines()[0]
        self.context = context
        super().__init__(self.message)

    def __str__(self) -> str:
        if not self.context:
            return self.message
        details = ", ".join(f"{k}={v}" for k, v in sorted(self.context.items()))
        return f"{self.message} ({details})"


class ConfigError(StoreError):
    """The store was given a configuration it cannot use."""


class DatabaseError(StoreError):
    """PostgreSQL refused or failed a statement."""


class ConnectionFailed(DatabaseError):
    """The connection to PostgreSQL failed or was lost."""


class ConnectionRejected(ConnectionFailed):
    """PostgreSQL refused the connection for a reason retrying cannot fix"""


class QueryTimeout(DatabaseError):
    """A statement ran past statement_timeout and was cancelled."""


class LockTimeout(DatabaseError):
    """A statement waited past lock_timeout for a lock."""


class Deadlocked(DatabaseError):
    """PostgreSQL ended the transaction to break a deadlock; nothing it wrote was kept."""


class LeaseLost(StoreError):
    """This worker no longer holds the session's lease; nothing was written."""


class TurnStopRequested(StoreError):
    """A cancel or interrupt was asked of this turn first; nothing was written.

    Not a lost lease (the worker still holds the session) and not a limit's
    refusal (``ChildRefused``): the turn is being stopped. A write the turn may
    not make once the request has committed (a spawn: its child could not be
    reached by the cascade) is refused with it, and the worker ends the turn as
    ``request`` asks, as if the request had reached it first."""

    def __init__(
        self, message: str | None = None, *, request: ControlRequest, session: Any, operation: str
    ) -> None:
        super().__init__(
            message,
            action=str(request.action),
            operation=operation,
            session=session,
            turn=request.turn_id,
        )
        self.request = request


class MigrationError(StoreError):
    """The schema migrations could not be applied."""


class MigrationChecksumMismatch(MigrationError):
    """An applied migration file was changed after it was applied."""


class InvalidInput(StoreError):
    """The request was refused as invalid; nothing was written."""


class UnstorableJson(InvalidInput):
    """The JSON given is not a value PostgreSQL's jsonb can hold; nothing was written."""


class UnknownSession(InvalidInput):
    """No session with this id exists; nothing was written."""


class IdempotencyConflict(InvalidInput):
    """This idempotency key was used with a different input, timeout or busy; nothing written."""


class UnknownTurn(InvalidInput):
    """No turn with this id belongs to this session; nothing was written."""


class AnswerConflict(InvalidInput):
    """This question was already answered with a different value; nothing was written."""


class UnknownSchedule(InvalidInput):
    """No schedule with this id exists (for this tenant); nothing was written."""


class UnknownWebhook(InvalidInput):
    """No webhook endpoint with this id exists (for this tenant); nothing was written."""


class NameTaken(InvalidInput):
    """The tenant already has a schedule with this name; nothing was written."""


class WorkerIdInUse(StoreError):
    """A live worker already runs with this worker id; pick another STINT_WORKER_ID."""


class AdmissionRefused(StoreError):
    """An admission limit refuses this turn; nothing was written."""

    def __init__(
        self, message: str | None = None, *, limit: str, value: int, tenant: str | None
    ) -> None:
        # The message already names all three; they are kept as attributes (not
        # context) so that the CLI's and the API's one line does not repeat them.
        super().__init__(message)
        self.limit = limit
        self.value = value
        self.tenant = tenant


class ChildRefused(StintError):
    """A limit (max_depth, max_fanout, the tenant's max_sessions) refuses this child;
    nothing was written.

    Not a StoreError: the store worked, the harness asked for too much. Raised into
    the harness by ``ctx.spawn``; unless caught there, the turn fails with it."""

    def __init__(self, message: str, *, limit: str, value: int, session: Any) -> None:
        super().__init__(f"{message} (session={session})")
        self.limit = limit
        self.value = value
        self.session = session


class QueueFull(AdmissionRefused):
    """The session's turn queue is full; nothing was written."""


class SessionLimitReached(AdmissionRefused):
    """The tenant holds as many sessions as its limit allows; nothing was written."""


class QuotaScopeUnknown(StoreError):
    """No quota scope of this name exists; create it with `stint quota set SCOPE`."""


class SessionBusy(StoreError):
    """The session already has a turn in progress and the input asked to be refused."""


class NoOpenQuestion(InvalidInput):
    """The session has no parked turn waiting for an answer with this step key."""


class EmbeddedPostgresError(StoreError):
    """The embedded PostgreSQL cluster could not be prepared or started."""


class PostgresBinariesNotFound(EmbeddedPostgresError):
    """No PostgreSQL server binaries were found on this machine."""
