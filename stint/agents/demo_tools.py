"""The tools ``stint.agents:chat`` offers by default (``STINT_AGENT_TOOLS``).

Small on purpose: they show each kind of tool the harness supports — a pure
function, the native journal tool, and a tool that needs a human's approval.
A deployment names its own registry instead.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from stint.agents.tools import ToolRegistry

__all__ = ["TOOLS"]

TOOLS = ToolRegistry()


@TOOLS.tool(idempotent=True)
async def add(
    a: Annotated[float, Field(description="first addend")],
    b: Annotated[float, Field(description="second addend")],
) -> float:
    """Add two numbers and return the sum."""
    return a + b


class _Note(BaseModel):
    text: str = Field(description="what to remember", max_length=2000)


TOOLS.journal(
    "note",
    _Note,
    description="Save a note in the session's journal (durable, written exactly once).",
)


@TOOLS.tool(needs_approval=True)
async def deploy(
    service: Annotated[str, Field(description="service to deploy", max_length=100)],
    version: Annotated[str, Field(description="version to roll out", max_length=100)],
) -> str:
    """Deploy a service version (a stand-in: it only reports). Needs a human's approval."""
    return f"{service} {version} is rolling out"
