"""Each example in ``examples/`` runs by its one command: with the fake provider (no
key), and with ``OPENAI_BASE_URL`` naming a provider (here a fake on loopback standing
in for a real one, so the test can see the key and model it was sent)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stint.lab.fake_provider import FakeProvider
from stint.postgres.scratch import ScratchTarget

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "examples" / "support_agent.py"
RESEARCH = ROOT / "examples" / "research_agent.py"


def _run(example: Path, db: ScratchTarget, tmp_path: Path, *args: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, str(example), *args],
        env={
            **os.environ,
            "STINT_DATABASE_URL": db.conninfo,
            "STINT_WORKSPACE": str(tmp_path / "workspace"),
            "STINT_DATA_DIR": str(tmp_path),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


async def test_the_support_example_parks_for_approval_with_the_fake_provider(
    db: ScratchTarget, tmp_path: Path
) -> None:
    out = _run(SUPPORT, db, tmp_path)
    for seen in (
        "[calling lookup_order] Here is what I found: order A1: 2 mugs, shipped yesterday.",
        '[parked: approve {"tool": "refund", "arguments": {"amount": 24.0, "order_id": "A1"}}',
        "[calling refund] Done: refunded 24.00 on order A1.",
        "model requests the provider saw: 4; checks passed: True",
    ):
        assert seen in out, out


async def test_the_research_example_saves_through_its_mcp_server(
    db: ScratchTarget, tmp_path: Path
) -> None:
    out = _run(RESEARCH, db, tmp_path, str(tmp_path / "state"))
    assert "[calling search_papers] [calling save_finding] I found two papers" in out, out
    assert "checks passed: True" in out, out
    findings = (tmp_path / "state" / "findings.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in findings] == [
        {"finding": "Exactly-once side effects (2024)"}
    ]


@pytest.mark.parametrize("example", [SUPPORT, RESEARCH], ids=["support", "research"])
async def test_each_example_talks_to_the_provider_openai_base_url_names(
    db: ScratchTarget, tmp_path: Path, example: Path
) -> None:
    script = __import__(f"examples.{example.stem}", fromlist=["SCRIPT"]).SCRIPT
    provider = FakeProvider(script)
    with provider.running():
        out = _run(
            example,
            db,
            tmp_path,
            str(tmp_path / "state"),
            OPENAI_BASE_URL=provider.url,
            OPENAI_API_KEY="sk-example-0123456789",
            OPENAI_MODEL="gpt-example",
        )
    assert f"provider {provider.url} (OPENAI_BASE_URL), model gpt-example" in out, out
    assert "sk-example-0123456789" not in out
    requests = provider.requests()
    assert requests and {(r.model, r.api_key) for r in requests} == {
        ("gpt-example", "sk-example-0123456789")
    }
