"""``stint-lab``: the lab's own command, apart from the product's ``stint``.

``stint-lab demo`` runs 2 workers x 4 slots on 24 sessions of the scripted
harness and prints a summary read from database timestamps; ``stint-lab demo
--agent`` holds a streamed tool-calling conversation with the agents harness
against the fake OpenAI-compatible provider (no API key). Both use the embedded
PostgreSQL unless ``STINT_DATABASE_URL`` is set, in a schema of their own.

Exit codes: 0 every demo turn succeeded and the invariant checks passed; 1
otherwise (or the database failed); 2 a bad setting or option; 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import version as package_version

import uvloop

from stint.config.logs import setup_logging
from stint.config.options import (
    ExitCodes,
    HelpFormatter,
    add_setting,
    exit_codes_epilog,
    overrides_from,
)
from stint.config.settings import Settings, SettingsError, load_settings, unknown_variables
from stint.errors import StintError

__all__ = ["build_parser", "main"]

log = logging.getLogger("stint.lab")

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

EXIT_CODES: ExitCodes = (
    (0, "every demo turn succeeded and the invariant checks passed"),
    (EXIT_FAILED, "a demo turn failed, a check failed, or the database failed"),
    (EXIT_BAD_INPUT, "a bad setting or option"),
    (EXIT_INTERRUPTED, "interrupted"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stint-lab",
        description="Stint's lab: demos and measurements, apart from the product CLI (stint).",
        epilog=exit_codes_epilog(EXIT_CODES),
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"stint-lab {package_version('stint')}"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "demo",
        help="run 2 workers x 4 slots on 24 sessions and print a summary",
        description=(
            "Run real workers on the embedded PostgreSQL (or STINT_DATABASE_URL), in a "
            "schema of their own, and print live progress and a summary from database "
            "timestamps; exit 0 when every turn succeeded and the checks passed."
        ),
        epilog=exit_codes_epilog(EXIT_CODES),
        formatter_class=HelpFormatter,
    )
    p.add_argument("--workers", type=int, default=2, metavar="W", help="worker processes (2)")
    p.add_argument("--slots", type=int, default=4, metavar="S", help="slots per worker (4)")
    p.add_argument("--sessions", type=int, default=24, metavar="N", help="sessions (24)")
    p.add_argument(
        "--agent",
        action="store_true",
        help="instead: a streamed tool-calling conversation with stint.agents:chat against a "
        "fake OpenAI-compatible provider started by the demo (no API key needed)",
    )
    add_setting(p, "--database-url", "database_url", metavar="URL")
    return parser


async def _demo(settings: Settings, args: argparse.Namespace) -> int:
    if args.agent:
        from stint.lab.demo_agent import run_agent_demo

        agent_code: int = await run_agent_demo(settings)
        return agent_code
    from stint.lab.demo import run_demo

    code: int = await run_demo(
        settings, workers=args.workers, slots=args.slots, sessions=args.sessions
    )
    return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("workers", "slots", "sessions"):
        if getattr(args, name) < 1:
            print(f"stint-lab demo: --{name} must be at least 1", file=sys.stderr)
            return EXIT_BAD_INPUT
    try:
        settings = load_settings(**overrides_from(args, "database_url"))
    except SettingsError as exc:
        print(f"stint-lab: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    setup_logging(settings.log_level, secrets=settings.secrets(), fmt=settings.log_format)
    for warning in unknown_variables():
        log.warning("%s", warning)
    try:
        return uvloop.run(_demo(settings, args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except StintError as exc:
        print(f"stint-lab {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
