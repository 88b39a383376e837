"""The quota gate's waiting rule and the token estimate, against a scripted context
(the reservations themselves are tested against PostgreSQL in
tests/integration/test_quotas.py, and end to end in test_quota_proof.py)."""

from __future__ import annotations

import json
import math
from typing import Any, cast

import pytest

from stint.agents.quota_gate import (
    QuotaConfig,
    QuotaGate,
    QuotaScopeMissing,
    QuotaTooSmall,
    estimate_tokens,
    reported_tokens,
)
from stint.store.errors import QuotaScopeUnknown
from stint.store.quotas import Grant
from stint.worker.context import Deferred, TurnContext


class ScriptedContext:
    """Answers each reservation with the next grant; records settlements."""

    def __init__(self, *grants: Grant) -> None:
        self.grants = list(grants)
        self.keys: list[str] = []
        self.settled: list[tuple[str, int | None]] = []

    async def quota_reserve(self, scope: str, key: str, estimate: int) -> Grant:
        self.keys.append(key)
        if not self.grants:
            raise QuotaScopeUnknown(scope=scope)
        return self.grants.pop(0)

    async def quota_settle(self, scope: str, key: str, actual: int | None) -> None:
        self.settled.append((key, actual))


def _gate(ctx: ScriptedContext, wait_in_place: float) -> QuotaGate:
    config = QuotaConfig(scope="s", wait_in_place=wait_in_place)
    return QuotaGate(cast(TurnContext, ctx), config, "t:model:0", 100)


GRANTED = Grant(True, False, None)


async def test_a_short_wait_is_spent_in_place_and_the_try_reserved_again() -> None:
    ctx = ScriptedContext(Grant(False, False, 0.01), GRANTED)
    gate = _gate(ctx, wait_in_place=1.0)
    await gate.reserve(1)
    assert ctx.keys == ["t:model:0#1", "t:model:0#1"]
    assert gate.waited == pytest.approx(0.01)


async def test_a_wait_longer_than_what_is_left_hands_the_turn_back() -> None:
    ctx = ScriptedContext(Grant(False, False, 0.02), Grant(False, False, 0.05))
    gate = _gate(ctx, wait_in_place=0.05)
    with pytest.raises(Deferred) as deferred:
        await gate.reserve(1)
    # 0.02 s waited in place; 0.05 more would pass the call's 0.05 s budget.
    assert (deferred.value.scope, deferred.value.wait_seconds) == ("s", 0.05)
    assert deferred.value.waited == pytest.approx(0.02)


async def test_a_scope_full_of_calls_in_flight_is_polled_then_handed_back() -> None:
    ctx = ScriptedContext(*[Grant(False, False, None)] * 10)
    gate = _gate(ctx, wait_in_place=0.1)
    with pytest.raises(Deferred) as deferred:
        await gate.reserve(1)
    assert deferred.value.waited <= 0.1 + 1e-9
    assert deferred.value.wait_seconds == 1.0


async def test_no_in_place_budget_hands_back_at_once() -> None:
    ctx = ScriptedContext(Grant(False, False, 0.001))
    with pytest.raises(Deferred):
        await _gate(ctx, wait_in_place=0).reserve(1)


async def test_a_request_larger_than_the_whole_tpm_fails_by_name() -> None:
    ctx = ScriptedContext(Grant(False, True, None))
    with pytest.raises(QuotaTooSmall, match="quota scope 's'"):
        await _gate(ctx, wait_in_place=1).reserve(1)


async def test_a_scope_that_does_not_exist_fails_the_call_saying_how_to_create_it() -> None:
    with pytest.raises(QuotaScopeMissing, match="stint quota set s"):
        await _gate(ScriptedContext(), wait_in_place=1).reserve(1)


def test_the_estimate_counts_the_request_json_and_the_answer_bound() -> None:
    messages = [{"role": "user", "content": "x" * 100}]
    tools = [{"type": "function", "function": {"name": "note"}}]
    config = QuotaConfig(scope="s", chars_per_token=4, output_tokens=50)
    prompt = len(json.dumps(messages)) + len(json.dumps(tools))
    request: dict[str, Any] = {"messages": messages, "tools": tools}
    assert estimate_tokens(request, config) == math.ceil(prompt / 4) + 50
    assert estimate_tokens({**request, "max_tokens": 7}, config) == math.ceil(prompt / 4) + 7


def test_usage_counts_only_when_the_provider_reported_both_parts() -> None:
    assert reported_tokens({"input_tokens": 3, "output_tokens": 4}) == 7
    assert reported_tokens({"input_tokens": 3, "output_tokens": None}) is None
