"""What every adapter harness is built from: the model step, the journal, the MCP servers.

Both adapters' ``durable(agent)`` factories build these the same way from the
worker's settings and workspace, and release them the same way when the
worker drains.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stint.adapters.errors import AdapterError
from stint.agents.config import AgentConfig
from stint.agents.mcp import open_mcp
from stint.agents.model_step import ModelStep
from stint.agents.provider import ChatProvider
from stint.config.settings import Settings
from stint.worker.context import TurnContext
from stint.worker.journal import EffectJournal

if TYPE_CHECKING:
    from stint.agents.mcp.servers import McpServers

__all__ = ["AdapterParts", "turn_message"]


@dataclass(frozen=True)
class AdapterParts:
    """The durable model step, the effect journal, the MCP servers (None: none), and
    the tools that may simply run again after a crash cut a call off."""

    steps: ModelStep
    journal: EffectJournal
    mcp: McpServers | None
    idempotent: frozenset[str]

    @classmethod
    def from_settings(
        cls, *, workspace: Path, settings: Settings, idempotent: frozenset[str]
    ) -> AdapterParts:
        """The provider from ``STINT_MODEL*``, the journal in the workspace, the
        servers ``STINT_MCP_SERVERS`` names."""
        config = AgentConfig.from_settings(settings)
        return cls(
            steps=ModelStep(config, ChatProvider(config.model)),
            journal=EffectJournal(workspace / "journals"),
            mcp=open_mcp(settings),
            idempotent=idempotent,
        )

    async def close(self) -> None:
        """Close the provider's connections and stop the MCP servers (the worker drains)."""
        await self.steps.close()
        if self.mcp is not None:
            await self.mcp.close()


def turn_message(ctx: TurnContext) -> str:
    """The user message a turn carries: its input is ``{"message": "<text>"}``."""
    text = ctx.input.get("message")
    if not isinstance(text, str) or not text:
        raise AdapterError('the turn input must be {"message": "<text>"}')
    return text
