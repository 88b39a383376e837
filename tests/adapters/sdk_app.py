"""The OpenAI Agents SDK agent the adapter tests run in real workers.

A support agent and a refunds agent it hands off to: ``lookup_order`` is a
plain function tool, ``refund`` needs a human's approval; both leave a
countable effect (``tests.adapters.effects``). An input guardrail refuses
messages that mention a password.
"""

from __future__ import annotations

from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunContextWrapper,
    function_tool,
    input_guardrail,
)

from stint.adapters.openai_agents import durable
from tests.adapters.effects import append_effect


@function_tool
async def lookup_order(order: str) -> str:
    """Look an order up by its id."""
    append_effect({"tool": "lookup_order", "order": order})
    return f"order {order}: 2 mugs, paid"


@function_tool(needs_approval=True)
async def refund(order: str, amount: float) -> str:
    """Refund an order (a human approves each refund)."""
    append_effect({"tool": "refund", "order": order, "amount": amount})
    return f"refunded {amount} on {order}"


@input_guardrail
async def no_passwords(
    context: RunContextWrapper[Any], agent: Agent[Any], given: Any
) -> GuardrailFunctionOutput:
    text = given if isinstance(given, str) else str(given)
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered="password" in text.lower())


refunds = Agent(
    name="refunds",
    instructions="You handle refunds.",
    tools=[lookup_order, refund],
)

support = Agent(
    name="support",
    instructions="You help customers with their orders.",
    tools=[lookup_order, refund],
    handoffs=[refunds],
    input_guardrails=[no_passwords],
)

harness = durable(support)
