"""``stint enqueue --lines``: many turns from JSON lines on stdin, in one transaction.

Each non-blank line is an object ``{"input": {...}, "session": "<id>"?,
"idempotency_key": "<key>"?}``; ``--tenant``, ``--pin``, ``--timeout`` and
``--busy`` apply to every line. Every line is checked by the rules the single
enqueue applies (``stint.ops.inputs``, ``stint.store.input_rules``) before
anything is sent, and a refusal names its line. The store then queues them all
or none (``ClientStore.turns_enqueue_many``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stint.ops.inputs import UsageError, enqueue_labels, parse_object
from stint.store.client import EnqueueItem
from stint.store.errors import InvalidInput
from stint.store.input_rules import check_batch_size, check_idempotency_key
from stint.store.vocabulary import BusyStrategy

__all__ = ["LineDefaults", "items_from_lines"]

_FIELDS = {"input", "session", "idempotency_key"}


@dataclass(frozen=True)
class LineDefaults:
    """What the command line says for every line."""

    tenant: str | None
    pin: str | None
    timeout_seconds: float | None
    busy: BusyStrategy
    traceparent: str | None


def items_from_lines(
    text: str,
    defaults: LineDefaults,
    *,
    max_bytes: int,
    max_depth: int,
    new_key: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> list[EnqueueItem]:
    """The batch ``text`` spells, one item per non-blank line; ``UsageError``
    (naming the line) for the first line that breaks a rule."""
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(_item(line, defaults, max_bytes, max_depth, new_key))
        except (UsageError, InvalidInput) as exc:
            raise UsageError(f"line {number}: {exc}") from None
    try:
        check_batch_size(len(items))
    except InvalidInput as exc:
        raise UsageError(str(exc)) from None
    return items


def _item(
    line: str,
    defaults: LineDefaults,
    max_bytes: int,
    max_depth: int,
    new_key: Callable[[], str],
) -> EnqueueItem:
    # The envelope's own size and depth bound the input inside it too.
    envelope = parse_object(line, max_bytes=max_bytes + 1024, max_depth=max_depth + 1)
    unknown = sorted(set(envelope) - _FIELDS)
    if unknown:
        raise UsageError(f"unknown field(s) {', '.join(unknown)}; expected {sorted(_FIELDS)}")
    turn_input = envelope.get("input")
    if not isinstance(turn_input, dict):
        raise UsageError('"input" must be a JSON object')
    parse_object(json.dumps(turn_input), max_bytes=max_bytes, max_depth=max_depth)
    session_id = _session(envelope.get("session"))
    key = enqueue_labels(_text(envelope, "idempotency_key"), check_idempotency_key, "the key")
    return EnqueueItem(
        idempotency_key=key or new_key(),
        turn_input=turn_input,
        session_id=session_id,
        tenant=defaults.tenant,
        pin=defaults.pin,
        timeout_seconds=defaults.timeout_seconds,
        busy=defaults.busy,
        # As the single enqueue: another tenant's session is unknown, and a key
        # without a session makes creating the session idempotent too.
        within_tenant=defaults.tenant if session_id is not None else None,
        session_key=key if session_id is None else None,
        traceparent=defaults.traceparent,
    )


def _text(envelope: dict[str, Any], field: str) -> str | None:
    value = envelope.get(field)
    if value is not None and not isinstance(value, str):
        raise UsageError(f'"{field}" must be a string')
    return value


def _session(value: Any) -> uuid.UUID | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError('"session" must be a session id (a string)')
    try:
        return uuid.UUID(value)
    except ValueError:
        raise UsageError(f"not a session id: {value[:60]!r}") from None
