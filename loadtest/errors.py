"""The load backends' error, and how a cleanup's own failure is recorded.

Both :mod:`loadtest.backends` and :mod:`loadtest.container` raise and clean up
the same way; they live here so that the container module need not import
the backends module, which imports it.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["BackendError", "noting_failure"]


class BackendError(Exception):
    """A load case's PostgreSQL could not be provided; never carries a password."""

    def __init__(self, message: str, **context: object) -> None:
        self.message = message
        self.context = context
        super().__init__(message)

    def __str__(self) -> str:
        details = ", ".join(f"{key}={value}" for key, value in sorted(self.context.items()))
        return f"{self.message} ({details})" if details else self.message


def noting_failure(exc: BaseException, cleanup: Callable[[], object]) -> None:
    """Run ``cleanup`` after ``exc``; its own failure is noted on ``exc``, not raised."""
    try:
        cleanup()
    except Exception as failure:
        exc.add_note(f"cleanup also failed: {failure!r}")
