"""Webhook signatures, as the Standard Webhooks specification writes them.

Headers: ``webhook-id`` (the delivery id, the same on every attempt: receivers
deduplicate by it), ``webhook-timestamp`` (Unix seconds when this attempt was
sent) and ``webhook-signature`` (``v1,`` + base64 of HMAC-SHA256 over
``id.timestamp.body`` keyed with the secret's bytes: the base64 after
``whsec_``). ``verify`` is what a receiver does, in constant time, refusing a
timestamp more than ``tolerance`` seconds from its clock (replays).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

from stint.store.sealed import SECRET_PREFIX

__all__ = ["TOLERANCE_SECONDS", "signature_headers", "verify"]

TOLERANCE_SECONDS = 300


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def _sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_headers(secret: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of one attempt."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": _sign(secret, message_id, timestamp, body),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float,
    tolerance: float = TOLERANCE_SECONDS,
) -> bool:
    """A receiver's check: the headers are there, the timestamp is recent, and one of the
    space-separated ``v1,`` signatures matches (compared in constant time)."""
    message_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp")
    given = headers.get("webhook-signature")
    if not message_id or not stamp or not given or not stamp.isdigit():
        return False
    if abs(now - int(stamp)) > tolerance:
        return False
    expected = _sign(secret, message_id, int(stamp), body)
    return any(hmac.compare_digest(expected, candidate) for candidate in given.split())
