"""What both clients give their ``httpx`` client: the base URL, the key as a
bearer token, a user agent naming this client, and the timeouts."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx

__all__ = ["http_options"]


def _user_agent() -> str:
    try:
        return f"stint-client/{version('stint')}"
    except PackageNotFoundError:
        return "stint-client"


def http_options(base_url: str, api_key: str, timeout: float) -> dict[str, Any]:
    """Keyword arguments for ``httpx.Client`` and ``httpx.AsyncClient``. The key is
    checked without being quoted in the error (an error message is often logged)."""
    if not api_key or not api_key.isascii() or not api_key.isprintable() or " " in api_key:
        raise ValueError("api_key must be a non-empty token of printable ASCII (stint keys create)")
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    return {
        "base_url": base_url,
        "headers": {"Authorization": f"Bearer {api_key}", "User-Agent": _user_agent()},
        "timeout": httpx.Timeout(timeout),
    }
