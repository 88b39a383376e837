"""Webhook signing secrets, sealed at rest.

A signing secret must be readable by the workers that sign deliveries, so it
cannot be stored as a hash the way API keys are. It is stored encrypted with
AES-256-GCM under the deployment's webhook key (``STINT_WEBHOOK_KEY``), with
the endpoint's id as associated data, so a ciphertext copied onto another
endpoint's row does not open, and with the key's fingerprint beside it, so a
worker holding another key says so instead of signing with garbage. The secret
itself is shown once, when the endpoint is created, and never logged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from dataclasses import dataclass
from uuid import UUID

from stint.store.errors import ConfigError, StoreError

__all__ = ["SECRET_PREFIX", "SealedSecret", "SecretUnreadable", "WebhookKey", "new_secret"]

SECRET_PREFIX = "whsec_"
_SECRET_BYTES = 32
_NONCE_BYTES = 12


class SecretUnreadable(StoreError):
    """A webhook secret cannot be opened with this worker's STINT_WEBHOOK_KEY."""


def new_secret() -> str:
    """A fresh signing secret, as Standard Webhooks spells one: ``whsec_`` + base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(_SECRET_BYTES)).decode()


@dataclass(frozen=True)
class SealedSecret:
    """What the database keeps: the ciphertext (nonce first) and the key's fingerprint."""

    cipher: bytes
    key_id: str


class WebhookKey:
    """The deployment's webhook key: 32 bytes, given as base64 (44 characters)."""

    def __init__(self, encoded: str) -> None:
        try:
            raw = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            raise ConfigError(
                "STINT_WEBHOOK_KEY must be 32 random bytes in base64 "
                "(make one: python3 -c 'import os,base64;print(base64.b64encode(os.urandom(32))"
                ".decode())')"
            )
        # Imported here: a process without a webhook key never loads cryptography (9 MiB).
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(raw)
        self.key_id = hashlib.sha256(b"stint-webhook-key:" + raw).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"WebhookKey(key_id={self.key_id})"  # never the key

    def seal(self, secret: str, *, endpoint_id: UUID) -> SealedSecret:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, secret.encode(), endpoint_id.bytes)
        return SealedSecret(nonce + sealed, self.key_id)

    def open(self, sealed: SealedSecret, *, endpoint_id: UUID) -> str:
        if sealed.key_id != self.key_id:
            raise SecretUnreadable(
                "the endpoint's secret was sealed with another STINT_WEBHOOK_KEY",
                endpoint=endpoint_id,
                sealed_with=sealed.key_id,
                this_key=self.key_id,
            )
        from cryptography.exceptions import InvalidTag

        nonce, body = sealed.cipher[:_NONCE_BYTES], sealed.cipher[_NONCE_BYTES:]
        try:
            return self._aead.decrypt(nonce, body, endpoint_id.bytes).decode()
        except InvalidTag:
            raise SecretUnreadable(
                "the endpoint's secret does not open (altered, or moved from another endpoint)",
                endpoint=endpoint_id,
            ) from None
