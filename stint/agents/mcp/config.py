"""The MCP servers file (``STINT_MCP_SERVERS``): which servers, how to reach them.

A JSON object with one list, ``servers``; each server is either a command
(stdio) or a URL (streamable HTTP)::

    {"servers": [
      {"name": "notes", "command": "python3", "args": ["-m", "notes_server"],
       "env": {"NOTES_DIR": "/srv/notes"}, "needs_approval": ["delete_note"]},
      {"name": "search", "url": "https://search.example/mcp",
       "headers_file": "/run/secrets/search-headers.json", "idempotent": ["lookup"]}
    ]}

A stdio server gets only the environment its ``env`` gives, on top of a safe
few variables (``PATH``, ``HOME``, ...): never the worker's own, which holds
the database URL and the model key. ``headers_file`` holds a JSON object of
HTTP headers (``Authorization``...): a mounted secret, read when the
connection opens and never logged or shown.
``needs_approval`` names tools whose every call waits for a human's answer;
``idempotent`` names tools that may run again after a crash cut a call off
(besides those the server itself marks read-only or idempotent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from stint.agents.errors import AgentConfigError

__all__ = ["McpConfigError", "McpServerConfig", "load_servers", "read_headers"]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


class McpConfigError(AgentConfigError):
    """The MCP servers file cannot be used."""


class McpServerConfig(BaseModel):
    """One server: a command to start (stdio) or a URL to reach (streamable HTTP)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME)
    command: str | None = Field(None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: Path | None = None
    url: str | None = Field(None, pattern=r"^https?://")
    headers_file: Path | None = None
    needs_approval: list[str] = Field(default_factory=list)
    idempotent: list[str] = Field(default_factory=list)
    timeout: float = Field(60.0, gt=0, le=3600, description="seconds one tool call may take")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP)")
        if self.url is None and self.headers_file is not None:
            raise ValueError("headers_file goes with url")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def where(self) -> str:
        """Where the server is, for ``stint status``: never a header or an env value."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return str(self.url)


class _ServersFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: list[McpServerConfig]


def load_servers(path: Path) -> list[McpServerConfig]:
    """The servers ``path`` names; a clear error for a missing, malformed or ambiguous file."""
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise McpConfigError(f"cannot read STINT_MCP_SERVERS {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"STINT_MCP_SERVERS {path} is not JSON: {exc}") from None
    try:
        servers = _ServersFile.model_validate(raw).servers
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise McpConfigError(f"STINT_MCP_SERVERS {path}: {problems}") from None
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise McpConfigError(f"STINT_MCP_SERVERS {path}: server names must be unique")
    return servers


def read_headers(config: McpServerConfig) -> dict[str, str]:
    """The server's HTTP headers from its secret file (none without one)."""
    if config.headers_file is None:
        return {}
    try:
        value: Any = json.loads(config.headers_file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise McpConfigError(
            f"MCP server {config.name}: cannot read headers_file "
            f"{config.headers_file}: {exc.strerror}"
        ) from None
    except json.JSONDecodeError:
        raise McpConfigError(
            f"MCP server {config.name}: headers_file {config.headers_file} is not JSON"
        ) from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise McpConfigError(
            f"MCP server {config.name}: headers_file must hold an object of strings"
        )
    return value
