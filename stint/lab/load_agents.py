"""The load test's agents for the SDK adapters: the agents harness's load turn, from an SDK.

Each is an agent with one ``note`` function tool, run through its adapter
(``STINT_HARNESS=stint.lab.load_agents:openai_agents`` or ``...:pydantic_ai``),
so the load script's turn (a model call asking for ``note``, the tool, a model
call for the reply) measures what an adapter costs beside ``stint.agents:chat``.
Each framework is imported only when its factory is called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stint.config.settings import Settings

__all__ = ["openai_agents", "pydantic_ai"]

_INSTRUCTIONS = "You are a helpful assistant. Use the tools when they help."


async def _note(text: str) -> str:
    """Save a note (the load test's tool)."""
    return f"noted: {text[:100]}"


def openai_agents(*, workspace: Path, settings: Settings) -> Any:
    """The OpenAI Agents SDK load agent, through ``stint.adapters.openai_agents``."""
    from agents import Agent, function_tool

    from stint.adapters.openai_agents import durable

    agent = Agent(
        name="load", instructions=_INSTRUCTIONS, tools=[function_tool(_note, name_override="note")]
    )
    return durable(agent)(workspace=workspace, settings=settings)


def pydantic_ai(*, workspace: Path, settings: Settings) -> Any:
    """The Pydantic AI load agent, through ``stint.adapters.pydantic_ai``."""
    from pydantic_ai import Agent, Tool

    from stint.adapters.pydantic_ai import durable

    agent: Agent[None, str] = Agent(instructions=_INSTRUCTIONS, tools=[Tool(_note, name="note")])
    return durable(agent)(workspace=workspace, settings=settings)
