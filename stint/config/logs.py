"""One logging setup for every entry point: one record per line, on stderr,
with every known secret masked; plain text, or JSON (``STINT_LOG_FORMAT=json``).

psycopg and psycopg_pool log libpq's messages as they are: several lines, and
in principle any text libpq chose to quote. Every record passes one filter on
the handler (so records of every logger, ours and the driver's, are covered)
that masks the configured secrets and folds the message onto one line; the
JSON form is built after that filter, from the masked message.

JSON lines carry the fields bound with ``log_fields`` where the record was
made: the worker's id (bound once at start) and, inside a slot, the session,
turn and lease epoch the runner is working on. They live in a ContextVar, so
each slot task sees its own, and a record made outside any turn has none.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from stint.store.redaction import REDACTED, redact

__all__ = [
    "LOG_FORMATS",
    "JsonFormatter",
    "SecretFilter",
    "bind_process_fields",
    "log_fields",
    "setup_logging",
]

LOG_FORMATS = ("text", "json")
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_fields: ContextVar[Mapping[str, str | int]] = ContextVar(
    "stint_log_fields", default=MappingProxyType({})
)

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


@contextmanager
def log_fields(**fields: str | int | None) -> Iterator[None]:
    """Add ``fields`` to every JSON line logged inside the block (this task only)."""
    token = _fields.set({**_fields.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _fields.reset(token)


def bind_process_fields(**fields: str | int) -> None:
    """Fields for the rest of this context and the tasks it starts (the worker id)."""
    _fields.set({**_fields.get(), **fields})


class SecretFilter(logging.Filter):
    """Masks ``secrets`` (and password-looking URL parts) in the message, the
    traceback and every string given as ``extra``, and folds the message onto one line."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def _mask(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return redact(text)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = " ".join(self._mask(record.getMessage()).split())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._mask(record.exc_text)
        for key, value in list(record.__dict__.items()):
            if key not in _STANDARD and isinstance(value, str):
                setattr(record, key, self._mask(value))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the bound fields
    (worker, session, turn, epoch where known), any ``extra=`` fields, and the
    traceback (already masked by the filter) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_fields.get(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_text:
            line["exc"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


def setup_logging(level: str, *, secrets: Iterable[str] = (), fmt: str = "text") -> None:
    logging.basicConfig(level=level.upper(), format=_TEXT_FORMAT)
    root = logging.getLogger()
    for handler in root.handlers:
        for old in [f for f in handler.filters if isinstance(f, SecretFilter)]:
            handler.removeFilter(old)
        handler.addFilter(SecretFilter(secrets))
        if fmt == "json":
            handler.setFormatter(JsonFormatter())
    logging.getLogger("psycopg").setLevel(logging.WARNING)
