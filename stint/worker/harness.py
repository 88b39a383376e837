"""The harness seam: the agent loop a turn runs, loaded from ``module:object``."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from stint.errors import StintError
from stint.worker.context import TurnContext

if TYPE_CHECKING:
    from stint.config.settings import Settings

__all__ = ["Harness", "HarnessLoadError", "close_harness", "load_harness"]


@runtime_checkable
class Harness(Protocol):
    """``run_turn`` returns the turn's output (JSON-serialisable) or raises to fail it."""

    async def run_turn(self, ctx: TurnContext) -> Any: ...


log = logging.getLogger("stint.worker.harness")

_CLOSE_SECONDS = 10.0


class HarnessLoadError(StintError):
    """The --harness import string does not name a usable harness."""


def load_harness(spec: str, *, workspace: Path, settings: Settings | None = None) -> Harness:
    """Import ``module:object``; a class or factory is called with ``workspace=``,
    and with ``settings=`` too when it takes that keyword (the agents harness reads
    its model and tool settings from there; the scripted harness needs none)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise HarnessLoadError(f"--harness must look like module:object, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HarnessLoadError(f"cannot import harness module {module_name!r}: {exc}") from exc
    target = getattr(module, attr, None)
    if target is None:
        raise HarnessLoadError(f"module {module_name!r} has no {attr!r}")
    if isinstance(target, Harness):
        harness = target
    elif settings is not None and _takes_settings(target):
        harness = target(workspace=workspace, settings=settings)
    else:
        harness = target(workspace=workspace)
    if not isinstance(harness, Harness):
        raise HarnessLoadError(f"{spec!r} has no async run_turn(ctx)")
    return harness


def _takes_settings(factory: Any) -> bool:
    try:
        return "settings" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


async def close_harness(harness: Harness) -> None:
    """Let the harness release what it holds (client connections, MCP server
    processes) once the worker has drained: its ``async close()``, if it has one,
    within a few seconds. A failure is logged; the worker exits all the same."""
    close = getattr(harness, "close", None)
    if close is None or not inspect.iscoroutinefunction(close):
        return
    try:
        await asyncio.wait_for(close(), timeout=_CLOSE_SECONDS)
    except Exception as exc:
        log.warning("the harness did not close cleanly: %s: %s", type(exc).__name__, exc)
