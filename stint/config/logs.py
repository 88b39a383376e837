"""One logging setup for both entry points: one line per record, on stderr,
with every known secret masked.

psycopg and psycopg_pool log libpq's messages as they are: several lines, and
in principle any text libpq chose to quote. Every record passes one filter on
the handler (so records of every logger, ours and the driver's, are covered)
that masks the configured secrets and folds the message onto one line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from stint.store.redaction import REDACTED, redact

__all__ = ["SecretFilter", "setup_logging"]


class SecretFilter(logging.Filter):
    """Masks ``secrets`` (and password-looking URL parts) and folds messages onto one line."""

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
        return True


def setup_logging(level: str, *, secrets: Iterable[str] = ()) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:
        for old in [f for f in handler.filters if isinstance(f, SecretFilter)]:
            handler.removeFilter(old)
        handler.addFilter(SecretFilter(secrets))
    logging.getLogger("psycopg").setLevel(logging.WARNING)
