"""The environment a report states: versions and machine size, never hostnames,
users or paths."""

from __future__ import annotations

import os
import platform
from importlib.metadata import version
from typing import Any

import psutil

__all__ = ["environment"]


def environment() -> dict[str, Any]:
    return {
        "stint": version("stint"),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
    }
