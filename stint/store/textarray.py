"""A ``text[]`` parameter dumped once, for values a worker sends with every statement.

psycopg dumps a Python list element by element on every execution (finding each
element's dumper, escaping each one with a regular expression): for a worker's
pins, the same list on every claim and every finish, that was a measurable part
of a turn's CPU. ``TextArray`` holds the array literal built once; its dumper,
registered on psycopg's global adapters when this module is imported (before
any pool connects), only hands it over.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

import psycopg
from psycopg.adapt import Dumper
from psycopg.postgres import types as pg_types

__all__ = ["TextArray", "text_array"]


class TextArray:
    """Immutable ``text[]`` value; ``items`` as given, ``literal`` as sent."""

    __slots__ = ("items", "literal")

    def __init__(self, items: Iterable[str]) -> None:
        self.items: tuple[str, ...] = tuple(items)
        quoted = ('"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"' for s in self.items)
        self.literal: bytes = ("{" + ",".join(quoted) + "}").encode()

    def __repr__(self) -> str:
        return f"TextArray({list(self.items)!r})"


def text_array(items: Sequence[str]) -> TextArray:
    """The ``TextArray`` of ``items``, built once per distinct value (a worker's
    pins are the same on every statement)."""
    return _cached(tuple(items))


@lru_cache(maxsize=64)
def _cached(items: tuple[str, ...]) -> TextArray:
    return TextArray(items)


class _TextArrayDumper(Dumper):
    oid = pg_types["text"].array_oid

    def dump(self, obj: TextArray) -> bytes:
        return obj.literal


psycopg.adapters.register_dumper(TextArray, _TextArrayDumper)
