"""The agents harness's errors. Each class's docstring is its default message.

Provider messages are carried (a user needs to know why the model refused) but
any copy of the API key in them is replaced before the error exists, so no log
line, event or turn error can ever show the key.
"""

from __future__ import annotations

from stint.errors import StintError
from stint.worker.harness import HarnessLoadError

__all__ = [
    "AgentConfigError",
    "AgentError",
    "ProviderError",
    "ProviderUnavailable",
    "TooManyIterations",
    "ToolArgumentsError",
]


class AgentError(StintError):
    """The agent loop could not finish the turn."""

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (type(self).__doc__ or "").strip().splitlines()[0]
        super().__init__(self.message)


class AgentConfigError(HarnessLoadError):
    """The agents harness is not configured well enough to start."""


class ProviderError(AgentError):
    """The model provider refused the request (a non-retryable error)."""

    def __init__(self, message: str | None = None, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ProviderUnavailable(ProviderError):
    """The model provider kept failing (429, 5xx or dropped connections) past the attempts."""


class TooManyIterations(AgentError):
    """The turn reached its limit of model calls without a final answer."""


class ToolArgumentsError(AgentError):
    """The model called a tool with arguments that do not fit its schema."""
