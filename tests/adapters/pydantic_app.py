"""The Pydantic AI agent the adapter tests run in real workers.

The same support agent as ``sdk_app``: ``lookup_order`` is a plain tool,
``refund`` needs a human's approval; both leave a countable effect.
"""

from __future__ import annotations

from pydantic_ai import Agent

from stint.adapters.pydantic_ai import durable
from tests.adapters.effects import append_effect

support: Agent[None, str] = Agent(instructions="You help customers with their orders.")


@support.tool_plain
async def lookup_order(order: str) -> str:
    """Look an order up by its id."""
    append_effect({"tool": "lookup_order", "order": order})
    return f"order {order}: 2 mugs, paid"


@support.tool_plain(requires_approval=True)
async def refund(order: str, amount: float) -> str:
    """Refund an order (a human approves each refund)."""
    append_effect({"tool": "refund", "order": order, "amount": amount})
    return f"refunded {amount} on {order}"


harness = durable(support)
