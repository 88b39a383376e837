"""JSON that PostgreSQL's jsonb can hold, checked before anything is written.

The CLI and the HTTP API both take JSON from users; both refuse here, with one
line saying why, what jsonb would refuse (``\\u0000``, lone surrogates, NaN and
Infinity, numbers too large for a double) or what would hurt on the way
(nesting deeper than the limit, counted without parsing, so no parser recurses
past its stack). Nothing that fails here ever reaches the database.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from stint.store.errors import UnstorableJson

__all__ = ["json_depth", "load_storable_json"]

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """Deepest nesting of arrays and objects, strings skipped, without parsing."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    if value == 0.0 and any(digit in "123456789" for digit in _mantissa(text)):
        # 1e-400 is not 0: stored as 0.0 it would silently be another number.
        raise ValueError(f"number {text[:40]} is too small to be told from 0")
    return value


def _mantissa(text: str) -> str:
    return text.lower().partition("e")[0]


def _check_strings(value: Any, what: str) -> None:
    """Refuse strings jsonb cannot store (keys included): NUL and lone surrogates."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                raise UnstorableJson(
                    f"{what} holds a \\u0000 character, which PostgreSQL cannot store"
                )
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise UnstorableJson(
                    f"{what} holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text"
                ) from None


def load_storable_json(text: str, *, max_depth: int, what: str = "input") -> Any:
    """The JSON value in ``text``, or ``UnstorableJson`` naming ``what`` and why."""
    depth = json_depth(text)
    if depth > max_depth:
        raise UnstorableJson(
            f"{what} nests {depth} levels deep, deeper than the limit {max_depth} "
            "(STINT_MAX_INPUT_DEPTH)"
        )
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or a number out of range
        raise UnstorableJson(f"{what} is not valid JSON: {str(exc).splitlines()[0]}") from None
    _check_strings(value, what)
    return value
