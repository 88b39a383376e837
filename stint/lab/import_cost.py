"""What each import of a worker costs in resident memory, step by step.

The issue's goal is a worker under 45 MiB; the matrix and the ladder measured
51-53 MiB while the settings were a pydantic-settings model (pydantic and
pydantic-settings were 10.7 MiB of it; a worker imports neither now). This
answers where it goes: a fresh interpreter imports the worker's dependencies
one at a time, in the order the worker loads them, and
reads its own VmRSS after each (so a step's figure is what it adds on top of
the steps before it; shared libraries count where they are first mapped).
The last step imports the worker itself, which pulls in the rest of Stint.

``python -m stint.lab.import_cost`` writes docs/load/imports.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from stint.lab.environment import DOCS
from stint.lab.report_head import report_head

__all__ = ["STEPS", "Step", "main", "measure"]

COMMAND = "python -m stint.lab.import_cost"

# (module, what it is): the worker's dependencies in the order it loads them.
STEPS: list[tuple[str, str]] = [
    ("asyncio", "asyncio (its SSL support loads Python's _ssl and OpenSSL)"),
    ("uvloop", "uvloop, the event loop"),
    ("psycopg", "psycopg 3 with its binary implementation (its own libpq)"),
    ("psycopg_pool", "psycopg_pool"),
    ("opentelemetry.trace", "the OpenTelemetry API (the SDK only loads when tracing is on)"),
    ("stint.telemetry.metrics", "Stint's metrics and their text format (/metrics)"),
    ("stint.worker.main", "the worker and the rest of Stint it imports"),
]

_PROBE = """
import importlib, json, sys

def rss_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

print(json.dumps(["python", rss_kib()]), flush=True)
for name in sys.argv[1:]:
    importlib.import_module(name)
    print(json.dumps([name, rss_kib()]), flush=True)
"""


@dataclass(frozen=True)
class Step:
    module: str
    what: str
    total_mib: float
    added_mib: float


def measure() -> list[Step]:
    """One fresh interpreter, the steps in order; its RSS after each."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *(module for module, _ in STEPS)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    readings = [json.loads(line) for line in done.stdout.splitlines()]
    whats = {"python": "the interpreter alone", **dict(STEPS)}
    steps = []
    previous = 0.0
    for module, kib in readings:
        total = kib / 1024
        steps.append(Step(module, whats[module], round(total, 1), round(total - previous, 1)))
        previous = total
    return steps


def render(steps: list[Step], generated_at: str) -> str:
    lines = [
        *report_head("What a worker's imports cost in memory", generated_at, COMMAND),
        f"Python {platform.python_version()} on {platform.machine()}. One fresh interpreter "
        "imports each module in turn and reads its own VmRSS after each (`/proc/self/status`); "
        "a row is what that import added to the rows above it.",
        "",
        "| import | what it is | adds MiB | RSS after, MiB |",
        "| --- | --- | --- | --- |",
        *(f"| `{s.module}` | {s.what} | {s.added_mib} | {s.total_mib} |" for s in steps),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument(
        "--output",
        type=Path,
        default=DOCS / "load" / "imports.md",
        help="where the table goes (docs/load/imports.md)",
    )
    args = parser.parse_args(argv)
    steps = measure()
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    args.output.write_text(render(steps, stamp))
    for step in steps:
        print(f"{step.module:24} +{step.added_mib:5.1f} MiB = {step.total_mib:5.1f} MiB")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
