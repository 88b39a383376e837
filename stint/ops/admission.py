"""``stint admission``: set and show the admission limits in the database.

Every producer reads the limits from PostgreSQL at enqueue, so a change here
holds for every CLI, API and library caller at once, whatever their own
environment says. ``stint status`` shows the same rows with their usage.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from stint.ops.inputs import UsageError
from stint.store.admission import DEFAULT_ROW, AdmissionStore, LimitsRow
from stint.store.vocabulary import AdmissionLimit

__all__ = ["add_admission_parser", "admission_json", "parse_limit"]

# integer columns; the backlog is a bigint but nobody queues 2^31 turns
_MAX_LIMIT = 2**31 - 1
_FLAGS = {
    AdmissionLimit.MAX_QUEUED: "--max-queued",
    AdmissionLimit.MAX_RUNNING: "--max-running",
    AdmissionLimit.MAX_SESSION_QUEUE: "--max-session-queue",
    AdmissionLimit.GLOBAL_BACKLOG: "--global-backlog",
    AdmissionLimit.MAX_SESSIONS: "--max-sessions",
    AdmissionLimit.MAX_DEPTH: "--max-depth",
    AdmissionLimit.MAX_FANOUT: "--max-fanout",
}


def parse_limit(flag: str, text: str) -> int | None:
    """A limit as typed: a whole number 1..2^31-1, or ``none`` to clear it."""
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise UsageError(f"{flag} must be a whole number or none, not {text[:40]!r}") from None
    if not 1 <= value <= _MAX_LIMIT:
        raise UsageError(f"{flag} must be 1..{_MAX_LIMIT} (or none), not {value}")
    return value


def _given_limits(args: argparse.Namespace) -> dict[AdmissionLimit, int | None]:
    return {
        limit: parse_limit(flag, text)
        for limit, flag in _FLAGS.items()
        if (text := getattr(args, str(limit))) is not None
    }


def _target_row(args: argparse.Namespace, limits: dict[AdmissionLimit, int | None]) -> str:
    """The row to write: the tenant's, or the defaults' (which also holds the backlog)."""
    if not limits:
        raise UsageError("give at least one limit: " + ", ".join(_FLAGS.values()))
    tenant_limits = set(limits) - {AdmissionLimit.GLOBAL_BACKLOG}
    if args.tenant is not None:
        if AdmissionLimit.GLOBAL_BACKLOG in limits:
            raise UsageError("--global-backlog is the deployment's limit, not a tenant's")
        return str(args.tenant)
    if tenant_limits and not args.default:
        raise UsageError("say whose limits these are: --tenant T or --default")
    return DEFAULT_ROW


def admission_json(rows: list[LimitsRow], backlog: int) -> dict[str, Any]:
    """The defaults, each tenant's own limits, and usage now (``*``'s usage is
    that of the sessions without a tenant, which the defaults govern)."""
    default = next((r for r in rows if r.tenant == DEFAULT_ROW), None)
    return {
        "global_backlog": {
            "limit": default.global_backlog if default is not None else None,
            "unfinished_turns": backlog,
        },
        "tenants": [row.as_json() for row in rows],
    }


async def run_admission(store: AdmissionStore, args: argparse.Namespace) -> int:
    """``set`` writes one row (validated before anything is written); both
    actions then print the limits as JSON."""
    if args.action == "set":
        limits = _given_limits(args)
        await store.admission_set(tenant=_target_row(args, limits), limits=limits)
    rows = await store.admission_list()
    print(json.dumps(admission_json(rows, await store.admission_backlog()), indent=2))
    return 0


def add_admission_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``admission`` command and its ``set``/``show`` actions."""
    p: argparse.ArgumentParser = sub.add_parser(
        "admission",
        help="set or show the admission limits enqueue checks (per tenant, default, global)",
        description="Limits in the database that every enqueue (and every new session) "
        "checks: a refused turn or session exits 3 (HTTP 429) and writes nothing. N is a "
        "whole number, or none to clear it (a tenant then follows the default; the default "
        "is then unlimited).",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    s = actions.add_parser("set", help="write limits; the others keep their value")
    whose = s.add_mutually_exclusive_group()
    whose.add_argument("--tenant", metavar="T", help="this tenant's own limits")
    whose.add_argument(
        "--default", action="store_true", help="the limits of every tenant without its own"
    )
    s.add_argument("--max-queued", metavar="N", help="unfinished turns of one tenant")
    s.add_argument(
        "--max-running", metavar="N", help="active sessions (with an unfinished turn) of one tenant"
    )
    s.add_argument("--max-session-queue", metavar="N", help="unfinished turns of one session")
    s.add_argument(
        "--max-sessions",
        metavar="N",
        help="sessions one tenant holds (any status; retention removes idle ones with no turns)",
    )
    s.add_argument("--global-backlog", metavar="N", help="unfinished turns of all tenants")
    s.add_argument(
        "--max-depth", metavar="N", help="levels of child sessions below a client's (ctx.spawn)"
    )
    s.add_argument("--max-fanout", metavar="N", help="child sessions one turn may spawn")
    actions.add_parser("show", help="the limits and what each tenant has in flight, as JSON")
    return p
