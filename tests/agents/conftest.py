"""Fixtures for the agents harness: the fake provider in a thread of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stint.lab.fake_provider import FakeProvider
from stint.lab.fake_script import DEMO_SCRIPT
from tests.turns import TEST_API_KEY

API_KEY = TEST_API_KEY


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    """A fake OpenAI-compatible server on loopback (``fake.url``), demo script."""
    provider = FakeProvider(DEMO_SCRIPT)
    with provider.running():
        yield provider
