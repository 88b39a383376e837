"""The scripted harness's worker never imports the model client or its HTTP stack."""

from __future__ import annotations

from pathlib import Path

from tests.imports_probe import modules_loaded

_PROBE = """
import json, sys
from pathlib import Path
from stint.config.settings import load_settings
from stint.worker.harness import load_harness
import stint.worker.main, stint.worker.supervisor, stint.worker.runner
settings = load_settings(model="m", model_base_url="http://127.0.0.1:9/v1")
load_harness(sys.argv[1], workspace=Path(sys.argv[2]), settings=settings)
heavy = ("openai", "httpx", "httpx2", "httpcore", "httpcore2", "anyio")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


def _loaded(harness: str, workspace: Path) -> list[str]:
    return modules_loaded(_PROBE, harness, str(workspace))


def test_scripted_worker_does_not_import_openai(tmp_path: Path) -> None:
    assert _loaded("stint.worker.scripted:harness", tmp_path) == []


def test_the_agents_harness_does(tmp_path: Path) -> None:
    assert "openai" in _loaded("stint.agents:chat", tmp_path)
