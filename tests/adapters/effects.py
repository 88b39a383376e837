"""A tool effect the tests can count: one line appended to a file per call.

The file is named by ``ADAPTER_EFFECTS`` in the worker's environment; each
line is the JSON the tool was called with, so a test asserts that each call's
effect exists exactly once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["EFFECTS_ENV", "append_effect", "read_effects"]

EFFECTS_ENV = "ADAPTER_EFFECTS"


def append_effect(record: dict[str, Any]) -> None:
    with open(os.environ[EFFECTS_ENV], "a", encoding="utf-8") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")
        out.flush()
        os.fsync(out.fileno())


def read_effects(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]
