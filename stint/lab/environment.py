"""The environment a report states (versions and machine size, never hostnames,
users or paths), and the checkout's ``docs/`` folder reports are committed to."""

from __future__ import annotations

import os
import platform
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psutil

__all__ = ["DOCS", "environment", "shown_path"]

DOCS = Path(__file__).resolve().parents[2] / "docs"
"""Where ``make bench`` and the figure scripts write, in a checkout."""


def environment() -> dict[str, Any]:
    return {
        "stint": version("stint"),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
    }


def shown_path(path: Path) -> Path:
    """``path`` as a reader would type it here: relative to the working directory when
    it lies below it."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path
