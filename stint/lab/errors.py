"""The load test's errors, and how a cleanup's own failure is recorded.

The backends, the container module and the cgroups module raise and clean up
the same way; this lives apart so that none of them imports another for it.
"""

from __future__ import annotations

from collections.abc import Callable

from stint.errors import StintError

__all__ = ["BackendError", "CgroupError", "LoadError", "noting_failure"]


class LoadError(StintError):
    """A load-test resource could not be provided; the message carries context."""

    def __init__(self, message: str, **context: object) -> None:
        self.message = message
        self.context = context
        super().__init__(message)

    def __str__(self) -> str:
        details = ", ".join(f"{key}={value}" for key, value in sorted(self.context.items()))
        return f"{self.message} ({details})" if details else self.message


class BackendError(LoadError):
    """A load case's PostgreSQL could not be provided; never carries a password."""


class CgroupError(LoadError):
    """A cgroup could not be set up, joined or removed."""


def noting_failure(exc: BaseException, cleanup: Callable[[], object]) -> None:
    """Run ``cleanup`` after ``exc``; its own failure is noted on ``exc``, not raised."""
    try:
        cleanup()
    except Exception as failure:
        exc.add_note(f"cleanup also failed: {failure!r}")
