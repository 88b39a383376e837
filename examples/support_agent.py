"""A support agent on the OpenAI Agents SDK, run durably by Stint.

One command, no API key (the fake provider, the embedded PostgreSQL)::

    .venv/bin/python examples/support_agent.py

With a real provider: ``OPENAI_BASE_URL=https://... OPENAI_API_KEY=... OPENAI_MODEL=...``
before the same command. The agent is plain SDK code: ``lookup_order`` is a
function tool, ``refund`` needs a human's approval (``needs_approval=True``).
``durable(support)`` is the harness a worker runs (``STINT_HARNESS=
support_agent:harness``, with this folder on ``PYTHONPATH``): every model
call and tool call is a durable step, and the refund parks the turn, freeing
its slot, until ``stint answer`` approves it (the demo answers it itself).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agents import Agent, function_tool

from stint.adapters.openai_agents import durable
from stint.lab.demo_agent import AgentDemo, run_example
from stint.lab.fake_script import FakeCall, FakeRule, FakeScript

ORDERS = {"A1": "2 mugs, shipped yesterday", "B7": "1 teapot, delivered"}


@function_tool
async def lookup_order(order_id: str) -> str:
    """Look an order up by its id."""
    return f"order {order_id}: {ORDERS.get(order_id, 'not found')}"


@function_tool(needs_approval=True)
async def refund(order_id: str, amount: float) -> str:
    """Refund an order. A human approves every refund."""
    return f"refunded {amount:.2f} on order {order_id}"


support = Agent(
    name="support",
    instructions="You help customers with their orders. Look orders up before answering.",
    tools=[lookup_order, refund],
)

harness = durable(support)

CONVERSATION = ("Where is my order A1?", "The mugs arrived broken: please refund order A1, 24.")
SCRIPT = FakeScript(
    (
        FakeRule(
            when="refund",
            rounds=((FakeCall("refund", {"order_id": "A1", "amount": 24.0}),),),
            reply="Done: {results}. Sorry about the mugs!",
        ),
        FakeRule(
            when="where",
            rounds=((FakeCall("lookup_order", {"order_id": "A1"}),),),
            reply="Here is what I found: {results}.",
        ),
    )
)
"""What the fake provider answers for this conversation (no key needed)."""


if __name__ == "__main__":
    sys.exit(
        run_example(
            AgentDemo(
                harness="support_agent:harness",
                conversation=CONVERSATION,
                script=SCRIPT,
                schema="stint_example_support",
                name="example-support",
                env={"PYTHONPATH": str(Path(__file__).resolve().parent)},
            )
        )
    )
