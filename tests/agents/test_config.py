"""The agents harness's settings: required model, the key from a variable or a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from stint.agents.config import AgentConfig
from stint.agents.errors import AgentConfigError
from stint.config.settings import SettingsError, load_settings
from stint.worker.harness import HarnessLoadError, load_harness

KEY = "sk-test-config-0123456789"


def test_the_model_is_required() -> None:
    with pytest.raises(AgentConfigError, match="STINT_MODEL must name the model"):
        AgentConfig.from_settings(load_settings())


def test_the_key_from_the_variable_or_a_file_never_both(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(f"{KEY}\n")
    from_file = AgentConfig.from_settings(load_settings(model="m", model_api_key_file=path))
    assert from_file.model.api_key.get_secret_value() == KEY
    assert KEY not in repr(from_file)
    given = AgentConfig.from_settings(load_settings(model="m", model_api_key=KEY))
    assert given.model.api_key.get_secret_value() == KEY
    with pytest.raises(AgentConfigError, match="not both"):
        AgentConfig.from_settings(
            load_settings(model="m", model_api_key=KEY, model_api_key_file=path)
        )
    path.write_text("\n")
    with pytest.raises(AgentConfigError, match="is empty"):
        AgentConfig.from_settings(load_settings(model="m", model_api_key_file=path))
    with pytest.raises(AgentConfigError, match="cannot read"):
        AgentConfig.from_settings(load_settings(model="m", model_api_key_file=tmp_path / "no"))


def test_bounds_name_the_variable() -> None:
    with pytest.raises(SettingsError, match="STINT_AGENT_MAX_ITERATIONS=0"):
        load_settings(agent_max_iterations=0)
    with pytest.raises(SettingsError, match="STINT_STREAM_FLUSH_MS=0"):
        load_settings(stream_flush_ms=0)


def test_a_misconfigured_harness_stops_the_worker_at_load(tmp_path: Path) -> None:
    with pytest.raises(HarnessLoadError, match="STINT_MODEL"):
        load_harness("stint.agents:chat", workspace=tmp_path, settings=load_settings())
    settings = load_settings(model="m", agent_tools="stint.agents.demo_tools:nothing")
    with pytest.raises(HarnessLoadError, match="names no tool registry"):
        load_harness("stint.agents:chat", workspace=tmp_path, settings=settings)
