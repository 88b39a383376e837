"""``stint quota``: provider quota scopes, set from the command line.

Scopes live in the database, not in each worker's environment, so every
worker of a deployment enforces the same limits and window, and changing a
limit needs no restart (the next reservation reads it). A deploy sets its
scopes with ``stint quota set`` (idempotent: run it from the same job that
runs ``stint migrate``); a worker names the one its model calls count
against with ``STINT_MODEL_QUOTA_SCOPE``.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from stint.config.settings import Settings
from stint.config.target import resolve_store_config
from stint.ops.inputs import UsageError, parse_seconds
from stint.store.config import ROLE_CLI
from stint.store.models import QuotaScope
from stint.store.pool import open_pool
from stint.store.quotas import QuotaLimits, QuotaStore

__all__ = ["add_quota_parser", "cmd_quota", "quota_json"]

_SCOPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$")  # the table's CHECK
_UNLIMITED = frozenset({"unlimited", "none"})
_MAX_LIMIT = {"rpm": 2**31 - 1, "tpm": 2**63 - 1, "concurrency": 2**31 - 1}
_WINDOW = (0.1, 86_400.0)


def quota_json(scope: QuotaScope) -> dict[str, Any]:
    """One scope as ``stint quota`` and ``stint status --json`` print it."""
    return {
        "scope": scope.scope,
        "rpm": scope.rpm,
        "tpm": scope.tpm,
        "concurrency": scope.concurrency,
        "window_seconds": scope.window_seconds,
        "requests": {
            "reserved": scope.requests_reserved,
            "reconciled": scope.requests_reconciled,
            "unknown": scope.requests_unknown,
            "in_flight": scope.requests_in_flight,
        },
        "tokens": {
            "reserved": scope.tokens_reserved,
            "reconciled": scope.tokens_reconciled,
            "refunded": scope.tokens_refunded,
            "debt": scope.tokens_debt,
            "unknown": scope.tokens_unknown,
            "in_flight": scope.tokens_in_flight,
        },
        "deferrals": scope.deferrals,
        "window": {"requests": scope.window_requests, "tokens": scope.window_tokens},
    }


def _scope(text: str) -> str:
    if not _SCOPE.match(text):
        raise UsageError(
            f"quota scope must be 1-100 letters, digits or . _ : / - "
            f"(starting with a letter or digit), not {text[:40]!r}"
        )
    return text


def _limit(name: str, text: str | None) -> tuple[int | None, bool]:
    """The limit given for ``--name`` and whether it was given (``unlimited`` clears)."""
    if text is None:
        return None, False
    if text.lower() in _UNLIMITED:
        return None, True
    try:
        value = int(text)
    except ValueError:
        raise UsageError(
            f"--{name} must be a whole number or 'unlimited', not {text[:40]!r}"
        ) from None
    if not 1 <= value <= _MAX_LIMIT[name]:
        raise UsageError(f"--{name} must be between 1 and {_MAX_LIMIT[name]}, not {value}")
    return value, True


def _limits(args: argparse.Namespace) -> QuotaLimits:
    values: dict[str, int | None] = {}
    clear: set[str] = set()
    for name in ("rpm", "tpm", "concurrency"):
        value, given = _limit(name, getattr(args, name))
        values[name] = value
        if given and value is None:
            clear.add(name)
    window = None
    if args.window is not None:
        window = parse_seconds(args.window, low=_WINDOW[0], high=_WINDOW[1], what="--window")
    return QuotaLimits(
        rpm=values["rpm"],
        tpm=values["tpm"],
        concurrency=values["concurrency"],
        window_seconds=window,
        clear=frozenset(clear),
    )


async def cmd_quota(settings: Settings, args: argparse.Namespace) -> int:
    scope = _scope(args.scope) if getattr(args, "scope", None) is not None else None
    limits = _limits(args) if args.action == "set" else None  # every check before any write
    config = resolve_store_config(settings)
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        quotas = QuotaStore(config, pool)
        if args.action == "list":
            for found in await quotas.quota_list():
                print(json.dumps(quota_json(found)))
            return 0
        assert scope is not None
        if args.action == "delete":
            if not await quotas.quota_delete(scope):
                raise UsageError(f"no quota scope {scope!r}")
            print(json.dumps({"scope": scope, "deleted": True}))
            return 0
        created = None
        if limits is not None:
            created = await quotas.quota_set(scope, limits)
        rows = await quotas.quota_list(scope)
        if not rows:
            raise UsageError(f"no quota scope {scope!r} (create it with stint quota set)")
        shown = quota_json(rows[0])
        print(json.dumps(shown if created is None else {**shown, "created": created}))
        return 0
    finally:
        await pool.close()


def add_quota_parser(sub: Any) -> None:
    """``stint quota set|show|list|delete``."""
    p = sub.add_parser(
        "quota",
        help="provider quota scopes: limits per window, shared by every worker",
        description="Provider quota scopes. rpm and tpm are per window (--window, 60 s by "
        "default: per minute). A worker's model calls count against STINT_MODEL_QUOTA_SCOPE.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = actions.add_parser("set", help="create a scope or change its limits (others are kept)")
    q.add_argument("scope", metavar="SCOPE")
    for name, what in (
        ("rpm", "requests per window"),
        ("tpm", "tokens per window"),
        ("concurrency", "requests in flight at once"),
    ):
        q.add_argument(f"--{name}", metavar="N", help=f"{what}; 'unlimited' clears it")
    q.add_argument("--window", metavar="SECONDS", help="the window's length (default 60)")
    q = actions.add_parser("show", help="one scope's limits, counters and window use, as JSON")
    q.add_argument("scope", metavar="SCOPE")
    actions.add_parser("list", help="every scope as JSON lines")
    q = actions.add_parser("delete", help="delete a scope and its ledger")
    q.add_argument("scope", metavar="SCOPE")
    p.set_defaults(run=cmd_quota)
