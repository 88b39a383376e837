"""The harness seam: the agent loop a turn runs, loaded from ``module:object``."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from stint.worker.context import TurnContext

__all__ = ["Harness", "HarnessLoadError", "load_harness"]


@runtime_checkable
class Harness(Protocol):
    """``run_turn`` returns the turn's output (JSON-serialisable) or raises to fail it."""

    async def run_turn(self, ctx: TurnContext) -> Any: ...


class HarnessLoadError(Exception):
    """The --harness import string does not name a usable harness."""


def load_harness(spec: str, *, workspace: Path) -> Harness:
    """Import ``module:object``; a class or factory is called with ``workspace=``."""
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
    harness = target if isinstance(target, Harness) else target(workspace=workspace)
    if not isinstance(harness, Harness):
        raise HarnessLoadError(f"{spec!r} has no async run_turn(ctx)")
    return harness
