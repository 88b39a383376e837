"""Which heavy modules a fresh interpreter imported: the probe for "costs nothing
when off" (tracing, metrics, the agents harness). A subprocess, because this
test process has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys


def modules_loaded(probe: str, *args: str) -> list[str]:
    """Run ``probe`` (a script printing a JSON list of module names) with ``args``."""
    out = subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded: list[str] = json.loads(out.stdout)
    return loaded
