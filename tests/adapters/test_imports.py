"""Importing Stint costs nothing of the adapters' frameworks until an adapter is used."""

from __future__ import annotations

from pathlib import Path

from tests.imports_probe import modules_loaded

_FRAMEWORKS = ("agents", "pydantic_ai", "mcp", "openai")

_PROBE = f"""
import json, sys
from pathlib import Path
from stint.config.settings import load_settings
from stint.worker.harness import load_harness
import stint.worker.main, stint.worker.supervisor, stint.worker.runner
import stint.adapters, stint.agents, stint.ops.cli
if sys.argv[1]:
    settings = load_settings(model="m", model_base_url="http://127.0.0.1:9/v1")
    load_harness(sys.argv[1], workspace=Path(sys.argv[2]), settings=settings)
print(json.dumps(sorted(m for m in {_FRAMEWORKS!r} if m in sys.modules)))
"""


def _loaded(harness: str, workspace: Path) -> list[str]:
    return modules_loaded(_PROBE, harness, str(workspace))


def test_stint_and_its_worker_import_no_framework(tmp_path: Path) -> None:
    assert _loaded("", tmp_path) == []
    assert _loaded("stint.worker.scripted:harness", tmp_path) == []


def test_the_agents_harness_loads_openai_only(tmp_path: Path) -> None:
    assert _loaded("stint.agents:chat", tmp_path) == ["openai"]


def test_each_adapter_loads_its_own_framework_only(tmp_path: Path) -> None:
    sdk = _loaded("tests.adapters.sdk_app:harness", tmp_path)
    assert {"agents", "openai"} <= set(sdk) and "pydantic_ai" not in sdk  # the SDK loads mcp
    pydantic = _loaded("tests.adapters.pydantic_app:harness", tmp_path)
    assert {"pydantic_ai", "openai"} <= set(pydantic) and "agents" not in pydantic
