"""The agents harness's view of the one Settings object, checked once at load.

The API key comes from ``STINT_MODEL_API_KEY`` or the file named by
``STINT_MODEL_API_KEY_FILE`` (a mounted secret), never both. It stays a
``SecretStr``: its repr is masked, and only the provider client unwraps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from stint.agents.errors import AgentConfigError
from stint.agents.quota_gate import QuotaConfig
from stint.config.settings import Settings

__all__ = ["AgentConfig", "ModelConfig", "StreamConfig"]


@dataclass(frozen=True)
class ModelConfig:
    """Where the model is and how hard a model call tries."""

    base_url: str
    model: str
    api_key: SecretStr = field(repr=False)
    timeout: float = 120.0
    max_attempts: int = 6
    retry_max_wait: float = 60.0


@dataclass(frozen=True)
class StreamConfig:
    """Token deltas are written when either bound is reached, whichever is first."""

    flush_seconds: float = 0.05
    flush_deltas: int = 50


@dataclass(frozen=True)
class AgentConfig:
    model: ModelConfig
    stream: StreamConfig
    tools: str
    system_prompt: str
    max_iterations: int
    history_messages: int
    quota: QuotaConfig | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> AgentConfig:
        if not settings.model:
            raise AgentConfigError("STINT_MODEL must name the model for stint.agents")
        if not settings.model_base_url.startswith(("http://", "https://")):
            raise AgentConfigError("STINT_MODEL_BASE_URL must be an http:// or https:// URL")
        return cls(
            model=ModelConfig(
                base_url=settings.model_base_url,
                model=settings.model,
                api_key=_api_key(settings),
                timeout=settings.model_timeout,
                max_attempts=settings.model_max_attempts,
                retry_max_wait=settings.model_retry_max_wait,
            ),
            stream=StreamConfig(
                flush_seconds=settings.stream_flush_ms / 1000,
                flush_deltas=settings.stream_flush_deltas,
            ),
            tools=settings.agent_tools,
            system_prompt=settings.agent_system_prompt,
            max_iterations=settings.agent_max_iterations,
            history_messages=settings.agent_history_messages,
            quota=QuotaConfig(
                scope=settings.model_quota_scope,
                wait_in_place=settings.quota_wait_in_place,
                chars_per_token=settings.quota_chars_per_token,
                output_tokens=settings.quota_output_tokens,
            )
            if settings.model_quota_scope
            else None,
        )


def _api_key(settings: Settings) -> SecretStr:
    given = settings.model_api_key.get_secret_value()
    path = settings.model_api_key_file
    if given and path is not None:
        raise AgentConfigError("set STINT_MODEL_API_KEY or STINT_MODEL_API_KEY_FILE, not both")
    if path is None:
        return SecretStr(given)
    return SecretStr(_read_key(path))


def _read_key(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AgentConfigError(
            f"cannot read STINT_MODEL_API_KEY_FILE {path}: {exc.strerror}"
        ) from None
    key = text.strip()
    if not key:
        raise AgentConfigError(f"STINT_MODEL_API_KEY_FILE {path} is empty")
    return key
