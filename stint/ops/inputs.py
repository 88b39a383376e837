"""Everything a user types, checked before anything is written.

Each refusal is a ``UsageError``: one line on stderr, exit 2, nothing written.
JSON is checked by ``stint.store.jsonvalues`` (what jsonb cannot hold, nesting
deeper than ``STINT_MAX_INPUT_DEPTH``), so no input ever reaches the database
only to be refused there with a raw SQLSTATE.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

from stint.errors import StintError
from stint.store.errors import UnstorableJson
from stint.store.jsonvalues import load_storable_json

__all__ = [
    "MAX_LABEL_CHARS",
    "UsageError",
    "check_argv",
    "check_label",
    "enqueue_labels",
    "parse_json",
    "parse_object",
    "read_text",
]

MAX_LABEL_CHARS = 256


class UsageError(StintError):
    """Bad command-line input; exit 2 with one line, nothing written."""


def check_argv(argv: Iterable[str]) -> None:
    """Refuse arguments that are not valid UTF-8 (Python hands undecodable bytes
    over as lone surrogates) or hold a NUL; the message never repeats them."""
    for position, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError(f"argument {position} is not valid UTF-8") from None
        if "\x00" in arg:
            raise UsageError(f"argument {position} contains a NUL character")


def read_text(value: str, stdin: BinaryIO) -> str:
    """``value``, or all of standard input when it is ``-``, decoded as strict UTF-8."""
    if value != "-":
        return value
    data = stdin.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"standard input is not valid UTF-8 (byte {exc.start})") from None


def enqueue_labels(value: str | None, rule: Callable[[str, str], str], what: str) -> str | None:
    """A tenant, pin or idempotency key from the command line, by the rule every door
    applies (``stint.store.input_rules``); None when it was not given."""
    return None if value is None else rule(value, what)


def check_label(what: str, value: str | None) -> str | None:
    """An identifier-like argument (idempotency key, tenant, pin, step key, reason)."""
    if value is None:
        return None
    if not value:
        raise UsageError(f"{what} must not be empty")
    if len(value) > MAX_LABEL_CHARS:
        raise UsageError(f"{what} is {len(value)} characters long, more than {MAX_LABEL_CHARS}")
    return value


def parse_json(text: str, *, max_bytes: int, max_depth: int) -> Any:
    """Any JSON value that PostgreSQL's jsonb can store exactly as given."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        raise UsageError(f"input is {size} bytes, larger than the limit {max_bytes}")
    try:
        return load_storable_json(text, max_depth=max_depth)
    except UnstorableJson as exc:
        raise UsageError(exc.message) from None


def parse_object(text: str, *, max_bytes: int, max_depth: int) -> dict[str, Any]:
    """A JSON object (a turn input), checked like ``parse_json``."""
    value = parse_json(text, max_bytes=max_bytes, max_depth=max_depth)
    if not isinstance(value, dict):
        raise UsageError(f"input must be a JSON object, not {type(value).__name__}")
    return value


def parse_seconds(text: str, *, low: float, high: float, what: str) -> float:
    """A finite number of seconds within ``low..high`` (``--timeout``)."""
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{what} must be a number of seconds, not {text[:40]!r}") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise UsageError(f"{what} must be between {low:g} and {high:g} seconds, not {text[:40]}")
    return value
