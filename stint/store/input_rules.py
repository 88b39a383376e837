"""One set of input rules for every door: the CLI, the HTTP API and the dashboard.

Each door used to judge names and values its own way: the CLI took any tenant
(``ácme``, which no key can name), control characters in pins and
idempotency keys, and a dashboard answer of any size or depth (a 700 KB answer
was stored; one nested 100,000 deep was a 500). Every door now calls these
functions (the API's request schemas use the same patterns), and the
refusals are ``InvalidInput`` (exit 2; HTTP 422, or 413 for a size).

- a **tenant** is what an API key can name: 1..100 of letters, digits, ``.``,
  ``_``, ``-`` (the schema's CHECK on ``api_keys`` and ``admission_limits``);
- a **pin** is 1..200 of letters, digits, ``.``, ``_``, ``:``, ``/``, ``-``;
- an **idempotency key** is 1..200 printable ASCII characters without space
  (what an HTTP header carries as it is); no door accepts a control character;
- a **signal name** is 1..100 of letters, digits, ``.``, ``_``, ``:``, ``-`` (it is a
  path segment of ``/v1/sessions/{id}/signals/{name}`` as it is);
- a **turn input**, an **answer** or a **signal payload** is JSON that jsonb stores exactly
  (``stint.store.jsonvalues``: no NaN, no number that is not what it says,
  ``1e-400`` included), nested at most ``STINT_MAX_INPUT_DEPTH`` and at most
  ``STINT_MAX_INPUT_BYTES`` as compact JSON (a signal's payload typed in the
  dashboard's form: empty is null, as ``/v1`` without a body);
- a **batch enqueue** holds 1..``MAX_BATCH_TURNS`` turns (one transaction: a
  bound on what one request may hold locked and keep in memory).
"""

from __future__ import annotations

import json
import re
from typing import Any

from stint.store.errors import InvalidInput
from stint.store.jsonvalues import json_depth, load_storable_json

__all__ = [
    "IDEMPOTENCY_KEY_PATTERN",
    "MAX_BATCH_TURNS",
    "PIN_PATTERN",
    "SIGNAL_NAME_PATTERN",
    "TENANT_PATTERN",
    "InputTooLarge",
    "answer_from_text",
    "check_batch_size",
    "check_idempotency_key",
    "check_pin",
    "check_signal_name",
    "check_tenant",
    "check_value_size",
    "json_size",
    "signal_payload_from_text",
]

TENANT_PATTERN = r"^[A-Za-z0-9._-]{1,100}$"
PIN_PATTERN = r"^[A-Za-z0-9._:/-]{1,200}$"
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]{1,200}$"
SIGNAL_NAME_PATTERN = r"^[A-Za-z0-9._:-]{1,100}$"

MAX_BATCH_TURNS = 1000

_TENANT = re.compile(TENANT_PATTERN)
_PIN = re.compile(PIN_PATTERN)
_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
_SIGNAL = re.compile(SIGNAL_NAME_PATTERN)


class InputTooLarge(InvalidInput):
    """The input is larger than STINT_MAX_INPUT_BYTES; nothing was written."""


def check_tenant(tenant: str, what: str = "tenant") -> str:
    """Refuse a tenant name that keys and admission limits cannot hold (the
    schema's CHECKs say the same; this says it in one line before any write)."""
    if not _TENANT.fullmatch(tenant):
        raise InvalidInput(f"{what} must be 1..100 characters of letters, digits, '.', '_' or '-'")
    return tenant


def check_pin(pin: str, what: str = "pin") -> str:
    if not _PIN.fullmatch(pin):
        raise InvalidInput(
            f"{what} must be 1..200 characters of letters, digits, '.', '_', ':', '/' or '-'"
        )
    return pin


def check_idempotency_key(key: str, what: str = "idempotency key") -> str:
    if not _KEY.fullmatch(key):
        raise InvalidInput(
            f"{what} must be 1..200 printable ASCII characters, without spaces or control "
            "characters"
        )
    return key


def check_signal_name(name: str, what: str = "signal name") -> str:
    if not _SIGNAL.fullmatch(name):
        raise InvalidInput(
            f"{what} must be 1..100 characters of letters, digits, '.', '_', ':' or '-'"
        )
    return name


def check_batch_size(count: int) -> int:
    """Refuse an empty batch enqueue, or one of more than ``MAX_BATCH_TURNS`` turns."""
    if not 1 <= count <= MAX_BATCH_TURNS:
        raise InvalidInput(
            f"a batch holds 1..{MAX_BATCH_TURNS} turns, not {count}; nothing was written"
        )
    return count


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON: the size every door limits."""
    return len(json.dumps(value, separators=(",", ":")).encode())


def check_value_size(value: Any, *, max_bytes: int, what: str) -> Any:
    size = json_size(value)
    if size > max_bytes:
        raise InputTooLarge(f"{what} is {size} bytes, larger than the limit {max_bytes}")
    return value


def answer_from_text(text: str, *, max_bytes: int, max_depth: int) -> Any:
    """A dashboard answer typed in a form: the JSON value it spells, or else the
    text itself, judged as ``/v1`` judges an answer (depth, storability, size)."""
    depth = json_depth(text)
    if depth > max_depth:
        raise InvalidInput(
            f"the answer nests {depth} levels deep, deeper than the limit {max_depth} "
            "(STINT_MAX_INPUT_DEPTH)"
        )
    try:
        json.loads(text)  # safe: its depth is within the limit
    except ValueError:
        spelled = json.dumps(text)  # not JSON: the answer is the text itself
    else:
        spelled = text
    value = load_storable_json(spelled, max_depth=max_depth, what="the answer")
    return check_value_size(value, max_bytes=max_bytes, what="the answer")


def signal_payload_from_text(text: str, *, max_bytes: int, max_depth: int) -> Any:
    """A signal's payload typed in a dashboard form: nothing typed is null (as a
    ``/v1`` send without a body), else the JSON value the text spells, judged as
    ``/v1`` judges a payload (depth, storability, size). Text that is not JSON
    is refused, not taken as a string: a mistyped object must not become one."""
    if not text.strip():
        return None
    value = load_storable_json(text, max_depth=max_depth, what="the payload")
    return check_value_size(value, max_bytes=max_bytes, what="the payload")
