"""What the store needs to reach PostgreSQL, validated before anything connects."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from stint.store.errors import ConfigError

__all__ = [
    "ROLE_API",
    "ROLE_API_FOLLOW",
    "ROLE_API_LISTEN",
    "ROLE_BACKGROUND",
    "ROLE_CLI",
    "ROLE_LISTEN",
    "ROLE_WORKER",
    "StoreConfig",
    "validate_role_name",
    "validate_schema_name",
]

ROLE_WORKER = "stint-worker-pool"
ROLE_LISTEN = "stint-worker-listen"
# A worker's schedules and webhook deliveries: a pool of their own, apart from the slots'.
ROLE_BACKGROUND = "stint-worker-background"
ROLE_CLI = "stint-cli"
# The API process: request handlers, followers' catch-up reads, its one LISTEN.
ROLE_API = "stint-api"
ROLE_API_FOLLOW = "stint-api-follow"
ROLE_API_LISTEN = "stint-api-listen"

_PLAIN_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def validate_role_name(name: str) -> str:
    """Refuse a role name that is not a plain lower-case identifier (like schema names:
    composed with ``Identifier`` anyway, checked so a typo fails at start)."""
    if not _PLAIN_IDENTIFIER.fullmatch(name) or name.startswith("pg_"):
        raise ConfigError(
            "role name must be a plain identifier: lower-case letters, digits and _, "
            "not starting with a digit or pg_, at most 63 characters",
            role=repr(name),
        )
    return name


def validate_schema_name(name: str) -> str:
    """Refuse any schema name that is not a plain lower-case SQL identifier.

    The name is still composed with ``psycopg.sql.Identifier`` everywhere; this
    check exists so that a typo or a hostile value fails loudly at start, before
    any statement runs, instead of creating an oddly quoted schema.
    """
    if not _PLAIN_IDENTIFIER.fullmatch(name) or name.startswith("pg_"):
        raise ConfigError(
            "schema name must be a plain identifier: lower-case letters, digits and _, "
            "not starting with a digit or pg_, at most 63 characters",
            schema=repr(name),
        )
    return name


@dataclass(frozen=True)
class StoreConfig:
    """Connection target and per-connection deadlines (seconds)."""

    conninfo: str = field(repr=False)
    schema: str = "stint"
    statement_timeout: float = 5.0
    lock_timeout: float = 5.0
    idle_in_transaction_timeout: float = 30.0
    connect_timeout: float = 10.0
    # The longest pause between attempts to reconnect after losing PostgreSQL.
    reconnect_max: float = 1.0

    def __post_init__(self) -> None:
        validate_schema_name(self.schema)

    @property
    def client_deadline(self) -> float:
        """How long a caller waits for any one store call: getting a connection
        (``connect_timeout``) plus running the statement (``statement_timeout``)."""
        return self.connect_timeout + self.statement_timeout + 1.0

    @property
    def work_channel(self) -> str:
        """NOTIFY channel that wakes claimers of this schema."""
        return f"{self.schema}_work"

    @property
    def control_channel(self) -> str:
        """NOTIFY channel that carries cancel/interrupt requests to lease holders."""
        return f"{self.schema}_control"

    @property
    def events_channel(self) -> str:
        """NOTIFY channel that wakes followers of this schema's event logs."""
        return f"{self.schema}_events"
