"""The adapters' errors. Each class's docstring is its default message."""

from __future__ import annotations

from stint.agents.errors import AgentConfigError, AgentError

__all__ = ["AdapterConfigError", "AdapterError"]


class AdapterConfigError(AgentConfigError):
    """The agent handed to a Stint adapter cannot be run durably as it is."""


class AdapterError(AgentError):
    """An adapter was used outside a Stint turn, or its framework misbehaved."""
