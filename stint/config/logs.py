"""One logging setup for both entry points: one line per record, on stderr."""

from __future__ import annotations

import logging

__all__ = ["setup_logging"]


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("psycopg").setLevel(logging.WARNING)
