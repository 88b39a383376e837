"""API keys: minted here, stored hashed, verified in constant time.

A token is ``stk_<id>_<secret>``. The id (16 hex digits) is public and finds
the row; the secret is 32 random bytes (URL-safe base64) that exist only in
the token: the table keeps their SHA-256 digest. A fast hash is the right one
for a high-entropy secret (a slow password hash protects guessable secrets;
there is nothing to guess here), and ``hmac.compare_digest`` keeps the check
from leaking how much of a guess matched. Nothing here logs or raises a token.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from stint.store.config import StoreConfig
from stint.store.errors import InvalidInput
from stint.store.fetch import fetch_all, fetch_one, fetch_optional
from stint.store.input_rules import check_tenant
from stint.store.models import ApiKey
from stint.store.pool import Pool
from stint.store.translate import guarded

__all__ = ["TOKEN_PREFIX", "Caller", "KeyStore", "NewApiKey", "parse_token"]

TOKEN_PREFIX = "stk"
_TOKEN = re.compile(rf"{TOKEN_PREFIX}_(?P<id>[0-9a-f]{{16}})_(?P<secret>[A-Za-z0-9_-]{{43}})")
# Compared against when a token names no live key, so that an unknown id costs
# the same digest and comparison as a known one.
_NO_KEY_DIGEST = hashlib.sha256(b"no such key").digest()


@dataclass(frozen=True)
class Caller:
    """Who a verified token belongs to: every /v1 query is filtered by ``tenant``.

    An ``operator`` key also sees every tenant in the dashboard and may read the
    API's /metrics; on /v1 it acts for its own tenant like any other key."""

    key_id: str
    tenant: str
    read_only: bool
    operator: bool = False

    def actor(self, door: str) -> dict[str, str | bool | None]:
        """Who acts, as a control's or an answer's event records it."""
        return {
            "door": door,
            "key_id": self.key_id,
            "tenant": self.tenant,
            "operator": self.operator,
        }

    @property
    def scope(self) -> str | None:
        """The tenant the dashboard filters by: None (every tenant) for an operator."""
        return None if self.operator else self.tenant


@dataclass(frozen=True)
class NewApiKey:
    """A key just created, with its token: the only time the token exists in the clear."""

    key: ApiKey
    token: str


@dataclass(frozen=True)
class _LiveKey:
    id: str
    tenant: str
    read_only: bool
    operator: bool
    secret_hash: bytes


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("ascii")).digest()


def parse_token(token: str) -> tuple[str, str] | None:
    """``(key id, secret)`` of a well-formed token, else None."""
    match = _TOKEN.fullmatch(token)
    if match is None:
        return None
    return match["id"], match["secret"]


class KeyStore:
    """Create, list, revoke and verify API keys."""

    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def keys_create(
        self,
        *,
        tenant: str,
        read_only: bool = False,
        label: str | None = None,
        operator: bool = False,
    ) -> NewApiKey:
        """A new key for ``tenant``; its token is returned once and stored nowhere.
        An ``operator`` key sees every tenant in the dashboard."""
        check_tenant(tenant)
        if label is not None and len(label) > 200:
            raise InvalidInput("label must be at most 200 characters")
        key_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        async with guarded("keys_create", self._config), self._pool.connection() as conn:
            key = await fetch_one(
                conn,
                ApiKey,
                "keys_insert",
                id=key_id,
                tenant=tenant,
                secret_hash=_digest(secret),
                read_only=read_only,
                label=label,
                operator=operator,
            )
        return NewApiKey(key, f"{TOKEN_PREFIX}_{key_id}_{secret}")

    async def keys_list(self, *, tenant: str | None = None) -> list[ApiKey]:
        """Every key (or one tenant's), revoked ones included, without secrets."""
        async with guarded("keys_list", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, ApiKey, "keys_list", tenant=tenant)

    async def keys_revoke(self, *, key_id: str) -> ApiKey | None:
        """Revoke a live key at once; None when no live key has this id."""
        async with guarded("keys_revoke", self._config), self._pool.connection() as conn:
            return await fetch_optional(conn, ApiKey, "keys_revoke", id=key_id)

    async def keys_verify(self, *, token: str) -> Caller | None:
        """The caller a token proves, or None (malformed, unknown, revoked or wrong)."""
        parsed = parse_token(token)
        if parsed is None:
            return None
        key_id, secret = parsed
        async with guarded("keys_verify", self._config), self._pool.connection() as conn:
            found = await fetch_optional(conn, _LiveKey, "keys_find_live", id=key_id)
        expected = found.secret_hash if found is not None else _NO_KEY_DIGEST
        if not hmac.compare_digest(_digest(secret), expected) or found is None:
            return None
        return Caller(
            key_id=found.id, tenant=found.tenant, read_only=found.read_only, operator=found.operator
        )
