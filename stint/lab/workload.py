"""What the workers run in a load case: the scripted fixture or the agents harness.

The agents workload starts the fake OpenAI-compatible provider in a thread of
the load-test process (outside the workers' cgroup), scripted with the load
turn (``LOAD_SCRIPT``: one model call asking for the journal tool, the tool,
one model call for the reply) and a fixed latency before each first token. Its
own request log proves one model call per step: no step called twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from stint.lab.fake_provider import FakeProvider
from stint.lab.fake_script import LOAD_SCRIPT
from stint.lab.model import AGENT_MODEL_CALLS_PER_TURN, CaseSpec
from stint.ops.checks import Check

__all__ = ["AGENT_TURN_INPUT", "Workload", "agent_env", "workload"]

SCRIPTED_HARNESS = "stint.worker.scripted:harness"
AGENTS_HARNESS = "stint.agents:chat"
# Each agent loop a case can run, by its CaseSpec.harness.
AGENT_LOOPS = {
    "agents": AGENTS_HARNESS,
    "openai-agents": "stint.lab.load_agents:openai_agents",
    "pydantic-ai": "stint.lab.load_agents:pydantic_ai",
}
_MODEL = "fake-model"
AGENT_TURN_INPUT = {"message": "load test turn: please note it"}
"""An agent loop's turn in a load case and in ``make bench`` (``LOAD_SCRIPT`` answers it)."""


def agent_env(harness: str, url: str) -> dict[str, str]:
    """The worker settings that run ``harness`` against the fake provider at ``url``."""
    return {"STINT_HARNESS": harness, "STINT_MODEL_BASE_URL": url, "STINT_MODEL": _MODEL}


@dataclass
class Workload:
    """Per-case worker environment, turn input and workload-specific checks."""

    configuration: dict[str, Any]
    env: dict[str, str]
    turn_input: dict[str, Any]
    fake: FakeProvider | None = field(default=None)

    def checks(self, spec: CaseSpec, turns: int) -> list[Check]:
        if self.fake is None:
            return []
        log = self.fake.requests()
        expected = AGENT_MODEL_CALLS_PER_TURN * turns
        outcomes: dict[str, int] = {}
        for record in log:
            outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
        return [
            Check(
                "model_called_once_per_step",
                len(log) == expected and outcomes.get("ok", 0) == expected,
                {"model_requests": len(log), "expected": expected, "outcomes": outcomes},
            )
        ]


@contextmanager
def workload(spec: CaseSpec) -> Iterator[Workload]:
    if spec.harness == "scripted":
        yield Workload(
            configuration={"harness": SCRIPTED_HARNESS},
            env={},
            turn_input={"min_wait_ms": spec.tool_wait_ms},
        )
        return
    harness = AGENT_LOOPS[spec.harness]
    fake = FakeProvider(LOAD_SCRIPT, latency_ms=spec.model_latency_ms)
    with fake.running() as url:
        yield Workload(
            configuration={
                "harness": harness,
                "model": _MODEL,
                "fake_provider": {
                    "where": "a thread of the load-test process, outside the worker cgroup",
                    "latency_before_first_token_ms": spec.model_latency_ms,
                    "model_calls_per_turn": AGENT_MODEL_CALLS_PER_TURN,
                    "tool": "note (the native journal tool)",
                },
            },
            env=agent_env(harness, url),
            turn_input=dict(AGENT_TURN_INPUT),
            fake=fake,
        )
