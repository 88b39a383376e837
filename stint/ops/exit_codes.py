"""What each ``stint`` command's exit code means, as data.

Each command's ``--help`` ends with its lines (``stint.ops.cli.build_parser``)
and ``docs/reference/cli.md`` is generated from them (``make reference``), so
the two cannot disagree. The numbers are the constants below; a command lists
only the codes it gives for its own reasons, and every command also gives
those of ``COMMON``.
"""

from __future__ import annotations

from collections.abc import Mapping

from stint.config.options import ExitCodes

__all__ = [
    "COMMANDS",
    "COMMON",
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE_CLOSED",
    "EXIT_REFUSED",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3
EXIT_INTERRUPTED = 130
EXIT_PIPE_CLOSED = 141

COMMON: ExitCodes = (
    (
        EXIT_FAILED,
        "the database failed: a refused connection, a wrong password or a missing database "
        "fail at once with the server's reason; an unreachable server is retried until "
        "STINT_CONNECT_TIMEOUT",
    ),
    (
        EXIT_BAD_INPUT,
        "a bad setting, or a malformed STINT_DATABASE_URL (its password masked); one line on "
        "stderr, nothing written",
    ),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
)
"""Codes every ``stint`` command may exit with, whatever it does."""

COMMANDS: Mapping[str, ExitCodes] = {
    "migrate": (
        (EXIT_OK, "up to date"),
        (
            EXIT_FAILED,
            "database or migration failure (a role that may not migrate is told to run it as "
            "the owner)",
        ),
        (EXIT_BAD_INPUT, "bad configuration"),
    ),
    "enqueue": (
        (EXIT_OK, "queued (or an idempotent retry, even at a limit)"),
        (
            EXIT_BAD_INPUT,
            "bad input, unknown session, or an idempotency key reused with another input or pin; "
            "nothing written",
        ),
        (
            EXIT_REFUSED,
            "refused by an admission limit (the session's queue, the tenant's unfinished turns, "
            "active sessions or sessions, the global backlog: one line naming the limit, its "
            "value and the tenant), or busy with --busy reject; nothing written",
        ),
    ),
    "cancel": (
        (EXIT_OK, "done (the JSON says what happened)"),
        (EXIT_BAD_INPUT, "unknown session, or --turn not a turn of this session"),
    ),
    "interrupt": (
        (EXIT_OK, "done (the JSON says what happened)"),
        (EXIT_BAD_INPUT, "unknown session"),
    ),
    "answer": (
        (EXIT_OK, "recorded, or the same answer again"),
        (EXIT_BAD_INPUT, "no such open question, or it was answered with another value"),
    ),
    "signal": (
        (EXIT_OK, "kept, or the same signal again (same key, name and payload)"),
        (EXIT_BAD_INPUT, "unknown session, a bad name or payload, or the key used otherwise"),
    ),
    "tail": (
        (EXIT_OK, "printed"),
        (EXIT_BAD_INPUT, "unknown session, or --after beyond its last event"),
        (
            EXIT_INTERRUPTED,
            "with --follow: stopped by Ctrl-C (SIGINT) or SIGTERM, its usual end (even when "
            "started with SIGINT ignored, as a background job of a script is)",
        ),
        (EXIT_PIPE_CLOSED, "the reader closed the pipe (| head); nothing on stderr"),
    ),
    "show": (
        (EXIT_OK, "printed"),
        (EXIT_BAD_INPUT, "unknown session, or --turn not a turn of this session"),
    ),
    "prune": (
        (EXIT_OK, "done (the JSON says what was removed)"),
        (EXIT_FAILED, "database failure, or the role may not delete history"),
    ),
    "status": ((EXIT_OK, "printed"),),
    "check": (
        (EXIT_OK, "every check passed"),
        (EXIT_FAILED, "a check failed (the report says which, with evidence)"),
    ),
    "embedded": ((EXIT_OK, "done"),),
    "keys": (
        (EXIT_OK, "done (create prints the key once)"),
        (EXIT_BAD_INPUT, "a bad tenant or label, or an unknown key id to revoke"),
    ),
    "quota": (
        (EXIT_OK, "done (set, show, delete print the scope as JSON; list one line per scope)"),
        (
            EXIT_BAD_INPUT,
            "a bad scope name, limit or window, or an unknown scope to show or delete; "
            "nothing written",
        ),
    ),
    "admission": (
        (EXIT_OK, "done (prints the limits as JSON)"),
        (EXIT_BAD_INPUT, "a bad value, tenant or combination of flags; nothing written"),
    ),
    "schedule": (
        (EXIT_OK, "done (create, show, pause, resume, delete print the schedule as JSON)"),
        (
            EXIT_BAD_INPUT,
            "a bad cron expression, interval, time zone, name or input, a name already taken, "
            "an unknown session, or an unknown schedule id; nothing written",
        ),
    ),
    "webhook": (
        (EXIT_OK, "done (create prints the signing secret once)"),
        (
            EXIT_BAD_INPUT,
            "a bad URL, event kind or tenant, no STINT_WEBHOOK_KEY to seal the secret with, or "
            "an unknown webhook id; nothing written",
        ),
    ),
    "api": (
        (EXIT_OK, "stopped by SIGTERM or SIGINT (open streams ended)"),
        (EXIT_FAILED, "cannot run (the database, a port taken)"),
        (EXIT_BAD_INPUT, "bad configuration"),
    ),
    "size": (
        (EXIT_OK, "printed"),
        (EXIT_BAD_INPUT, "an unreadable report or bad numbers"),
    ),
}
"""Each command's own codes, by the name ``stint COMMAND`` takes."""
