"""Dashboard sign-in sessions: the browser's cookie holds a session token, never
the API key it was opened with.

Sign-in exchanges a verified key for a session (``sds_<id>_<secret>``); only
the secret's SHA-256 digest is stored (migration 0012), and it is compared in
constant time. A session ends at its expiry (``STINT_DASHBOARD_SESSION_SECONDS``),
at sign-out, or as soon as its key is revoked: every check joins the live key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from stint.store.config import StoreConfig
from stint.store.fetch import execute, fetch_optional
from stint.store.keys import Caller
from stint.store.pool import Pool
from stint.store.translate import guarded

__all__ = ["SESSION_PREFIX", "DashboardSessionStore", "parse_session_token"]

SESSION_PREFIX = "sds"
_TOKEN = re.compile(rf"{SESSION_PREFIX}_(?P<id>[0-9a-f]{{16}})_(?P<secret>[A-Za-z0-9_-]{{43}})")
_NO_SESSION_DIGEST = hashlib.sha256(b"no such session").digest()


@dataclass(frozen=True)
class _LiveSession:
    key_id: str
    tenant: str
    read_only: bool
    operator: bool
    secret_hash: bytes


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("ascii")).digest()


def parse_session_token(token: str) -> tuple[str, str] | None:
    """``(session id, secret)`` of a well-formed token, else None."""
    match = _TOKEN.fullmatch(token)
    return None if match is None else (match["id"], match["secret"])


class DashboardSessionStore:
    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def sessions_open(self, *, key_id: str, seconds: float) -> str:
        """A new session for a verified key: its token (shown to the browser once)."""
        session_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        params = {
            "id": session_id,
            "secret_hash": _digest(secret),
            "key_id": key_id,
            "seconds": seconds,
        }
        async with guarded("dashboard_sessions_insert", self._config), self._pool.connection() as c:
            await execute(c, "dashboard_sessions_insert", **params)
        return f"{SESSION_PREFIX}_{session_id}_{secret}"

    async def sessions_verify(self, *, token: str) -> Caller | None:
        """The caller a live session token proves, or None."""
        parsed = parse_session_token(token)
        if parsed is None:
            return None
        session_id, secret = parsed
        async with (
            guarded("dashboard_sessions_find_live", self._config),
            self._pool.connection() as c,
        ):
            found = await fetch_optional(
                c, _LiveSession, "dashboard_sessions_find_live", id=session_id
            )
        expected = found.secret_hash if found is not None else _NO_SESSION_DIGEST
        if not hmac.compare_digest(_digest(secret), expected) or found is None:
            return None
        return Caller(
            key_id=found.key_id,
            tenant=found.tenant,
            read_only=found.read_only,
            operator=found.operator,
        )

    async def sessions_revoke(self, *, token: str) -> None:
        """Sign-out: the session named by ``token`` ends now (a malformed one: nothing)."""
        parsed = parse_session_token(token)
        if parsed is None:
            return
        async with guarded("dashboard_sessions_revoke", self._config), self._pool.connection() as c:
            await execute(c, "dashboard_sessions_revoke", id=parsed[0])
