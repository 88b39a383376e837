"""Fixtures for the adapter proofs: the fake provider with the support script."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stint.lab.fake_provider import FakeProvider
from stint.lab.fake_script import FakeCall, FakeRule, FakeScript

SUPPORT_SCRIPT = FakeScript(
    (
        FakeRule(
            when="look up",
            rounds=((FakeCall("lookup_order", {"order": "A1"}),),),
            reply="Here it is: {results}",
        ),
        FakeRule(
            when="refund",
            rounds=((FakeCall("refund", {"amount": 5.0, "order": "A1"}),),),
            reply="Refund: {results}",
        ),
        FakeRule(
            when="transfer",
            rounds=(
                (FakeCall("transfer_to_refunds", {}),),
                (FakeCall("lookup_order", {"order": "B2"}),),
            ),
            reply="Refunds desk: {results}",
        ),
        FakeRule(reply="Hello."),
    )
)
"""What the adapters' test agents are answered, by the first rule whose word the
user message holds: a lookup (a plain tool, then the reply), a refund (a tool that
needs approval), a handoff to the refunds agent and a lookup there."""


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    provider = FakeProvider(SUPPORT_SCRIPT)
    with provider.running():
        yield provider
