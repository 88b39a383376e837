"""``stint size``: workers x slots for a workload, from a load-test report's costs.

Arithmetic on a ``matrix.json`` only (``stint.ops.sizing``): it never resolves
or opens a database. The lease and drain seconds default to this process's
settings (``STINT_LEASE_SECONDS``, ``STINT_DRAIN_SECONDS``), the ones the
workers would run with.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from stint.config.settings import Settings
from stint.ops.inputs import UsageError
from stint.ops.sizing import Budget, Workload, size
from stint.ops.sizing_costs import SizingError, cost_model
from stint.ops.sizing_render import render_sizing

__all__ = ["DEFAULT_REPORT", "add_size_parser", "cmd_size"]

DEFAULT_REPORT = Path("docs/load/matrix.json")
"""The report a checkout commits (relative to the working directory)."""


def _load_matrix(path: Path) -> dict[str, Any]:
    try:
        matrix = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(
            f"no report at {path}: pass --report FILE (pytest loadtest --run-load writes "
            "report/load/matrix.json; a checkout commits docs/load/matrix.json)"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UsageError(f"{path} is not JSON") from None
    if not isinstance(matrix, dict) or not isinstance(matrix.get("summary"), list):
        raise UsageError(f"{path} is not a load-test matrix report (no summary)")
    return matrix


async def cmd_size(settings: Settings, args: argparse.Namespace) -> int:
    """Print the options and the recommendation (text, or JSON with --json)."""
    matrix = _load_matrix(args.report)
    workload = Workload(
        rate=args.rate,
        turn_seconds=args.turn_seconds,
        headroom=args.headroom,
        wait_target=args.wait_target,
    )
    budget = Budget(
        worker_cpu=args.worker_cpu,
        cpu_target=args.cpu_target,
        worker_memory_mib=args.worker_memory_mib,
        max_slots_per_worker=args.max_slots_per_worker,
        spare_workers=args.spare_workers,
        slots_per_worker=args.slots_per_worker,
        lease_seconds=settings.lease_seconds,
        drain_seconds=settings.drain_seconds,
    )
    try:
        model = cost_model(matrix, args.harness)
        if args.cpu_per_turn_ms is not None:
            if not (math.isfinite(args.cpu_per_turn_ms) and args.cpu_per_turn_ms > 0):
                raise SizingError(
                    f"CPU per turn must be a positive number of ms, not {args.cpu_per_turn_ms}"
                )
            model = model.with_figure("worker_cpu_ms_per_turn", args.cpu_per_turn_ms)
        sizing = size(model, workload, budget)
    except SizingError as exc:
        raise UsageError(str(exc)) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{args.report} is not a load-test matrix report ({exc!r})") from None
    if args.json:
        print(json.dumps({"report": str(args.report), **sizing.as_json()}, indent=2))
    else:
        print(render_sizing(sizing, report=str(args.report)))
    return 0


def add_size_parser(sub: Any) -> None:
    """``stint size``."""
    p = sub.add_parser(
        "size",
        help="workers x slots for a workload, from a load-test report's costs (no database)",
        description="Size a deployment from measured costs: slots from the arrival rate and "
        "the active turn seconds (Little's law, plus headroom or queueing room, whichever is "
        "more), then the fewest workers that carry them with one worker lost, each within its "
        "CPU and memory budget and a cap on slots per worker. Prints the recommendation and "
        "the rule that chose it, a table of options, the costs used, whether the answer "
        "survives every cost moving within its measured range, and what the report's machine "
        "could not know. STINT_LEASE_SECONDS and STINT_DRAIN_SECONDS are read as the workers "
        "would.",
    )
    p.add_argument(
        "--report",
        type=Path,
        default=DEFAULT_REPORT,
        metavar="FILE",
        help=f"the load test's matrix.json (default: {DEFAULT_REPORT}, the committed one)",
    )
    p.add_argument(
        "--rate", type=float, required=True, metavar="R", help="turns arriving per second"
    )
    p.add_argument(
        "--turn-seconds",
        type=float,
        required=True,
        metavar="T",
        help="mean seconds a turn is active (holds a slot; parked time does not count)",
    )
    p.add_argument(
        "--headroom", type=float, default=0.3, metavar="H", help="room above the mean, 0..10 (0.3)"
    )
    p.add_argument(
        "--wait-target",
        type=float,
        default=0.01,
        metavar="P",
        help="at most this share of turns may wait for a slot at the mean rate (0.01)",
    )
    p.add_argument(
        "--harness",
        choices=("scripted", "agents"),
        default="scripted",
        help="whose measured costs to use: the scripted fixture, or the agents harness "
        "against the fake provider (scripted)",
    )
    p.add_argument(
        "--cpu-per-turn-ms",
        type=float,
        metavar="MS",
        help="your own harness's worker CPU per turn, in place of the measured one",
    )
    p.add_argument(
        "--worker-cpu", type=float, default=1.0, metavar="CORES", help="CPU per worker (1)"
    )
    p.add_argument(
        "--cpu-target",
        type=float,
        default=0.5,
        metavar="F",
        help="share of --worker-cpu a worker may use with one worker lost (0.5)",
    )
    p.add_argument(
        "--worker-memory-mib",
        type=float,
        default=128.0,
        metavar="MIB",
        help="memory per worker (128, the Kubernetes manifest's limit)",
    )
    p.add_argument(
        "--max-slots-per-worker",
        type=int,
        metavar="S",
        help="cap on slots per worker: what one crash or drain may touch (default: the most "
        "the report measured)",
    )
    p.add_argument(
        "--spare-workers",
        type=int,
        default=1,
        metavar="N",
        help="workers that may be lost while the rest still carry the load (1: N+1)",
    )
    p.add_argument(
        "--slots-per-worker",
        type=int,
        metavar="S",
        help="size with exactly S slots per worker instead of choosing",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(run=cmd_size)
