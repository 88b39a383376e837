"""``stint``: the operator CLI (migrate, enqueue, cancel, interrupt, answer, signal, tail, show,
status, check, size, embedded, keys, quota, admission, schedule, webhook, api; the demo
is ``stint-lab demo``).

Exit codes, the same for every command: 0 done; 1 a failure (the database, a
failed check); 2 bad input or configuration (one line on stderr, nothing
written); 3 refused by the queue (an admission limit, or busy with ``--busy reject``); 130
interrupted; 141 the reader of standard output went away (``| head``). Each
command's own are data in ``stint.ops.exit_codes``, shown by its ``--help``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any, NoReturn

import uvloop

from stint.agents.mcp.config import McpConfigError
from stint.config.logs import setup_logging
from stint.config.options import HelpFormatter, add_setting, exit_codes_epilog, overrides_from
from stint.config.settings import (
    Settings,
    SettingsError,
    field_range,
    load_settings,
    unknown_variables,
)
from stint.config.target import embedded_cluster, resolve_store_config, workspace_dir
from stint.ops.admission import add_admission_parser, admission_json, run_admission
from stint.ops.checks import run_checks
from stint.ops.enqueue_lines import LineDefaults, items_from_lines
from stint.ops.exit_codes import (
    COMMANDS,
    COMMON,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_PIPE_CLOSED,
    EXIT_REFUSED,
)
from stint.ops.follow import follow_events, look_up, tail_start, tell_pruned
from stint.ops.inputs import (
    UsageError,
    check_argv,
    check_label,
    enqueue_labels,
    parse_json,
    parse_object,
    parse_seconds,
    read_text,
)
from stint.ops.quota_cli import add_quota_parser
from stint.ops.schedule_cli import add_schedule_parser
from stint.ops.show import session_json, turn_of_session_json
from stint.ops.size_cli import add_size_parser
from stint.ops.status import mcp_listing, render_status
from stint.ops.stopping import until_stopped
from stint.ops.webhook_cli import add_webhook_parser
from stint.store.admission import AdmissionStore
from stint.store.children import ChildStore
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.controls import ControlStore
from stint.store.errors import (
    AdmissionRefused,
    InvalidInput,
    SessionBusy,
    StoreError,
    UnknownSession,
    UnknownTurn,
)
from stint.store.input_rules import (
    MAX_BATCH_TURNS,
    check_idempotency_key,
    check_pin,
    check_signal_name,
    check_tenant,
)
from stint.store.keys import KeyStore
from stint.store.migrate import migrate
from stint.store.models import ApiKey
from stint.store.pool import open_pool
from stint.store.retention import RetentionStore
from stint.store.usage import UsageStore
from stint.store.vocabulary import BusyStrategy, ControlAction
from stint.telemetry.names import SPAN_ENQUEUE
from stint.telemetry.tracing import (
    TracingUnavailable,
    current_traceparent,
    parse_traceparent,
    setup_tracing,
    span,
)
from stint.worker.journal import EffectJournal
from stint.worker.pruner import RetentionPlan, prune

__all__ = ["main"]

log = logging.getLogger("stint.cli")

_ALSO = "and, like every stint command: " + "; ".join(
    f"{code} {meaning.split(':')[0].split(';')[0]}" for code, meaning in COMMON
)


class _Parser(argparse.ArgumentParser):
    """argparse with its complaint on one line (usage stays in ``--help``), and
    descriptions and epilogs that keep their lines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _parse_id(text: str, what: str = "session") -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise UsageError(f"not a {what} id: {text[:60]!r}") from None


def _timeout(text: str) -> float:
    low, high = field_range("turn_timeout")
    return parse_seconds(text, low=low, high=high, what="--timeout")


async def _with_client(config: StoreConfig, action: Callable[[ClientStore], Awaitable[int]]) -> int:
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        return await action(ClientStore(config, pool))
    finally:
        await pool.close()


async def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    config = resolve_store_config(settings)
    applied = await migrate(config, app_role=settings.app_role or None)
    for migration in applied:
        print(f"applied {migration.label}")
    print(f"schema {config.schema}: {len(applied)} migration(s) applied, up to date")
    if settings.app_role:
        print(f"role {settings.app_role}: granted the worker/API privileges on {config.schema}")
    return 0


async def cmd_enqueue(settings: Settings, args: argparse.Namespace) -> int:
    if args.lines:
        return await _enqueue_lines(settings, args)
    if args.input_json is None:
        raise UsageError("INPUT_JSON is required (or --lines, to read JSON lines on stdin)")
    text = read_text(args.input_json, sys.stdin.buffer)
    turn_input = parse_object(
        text, max_bytes=settings.max_input_bytes, max_depth=settings.max_input_depth
    )
    session_id = _parse_id(args.session) if args.session else None
    key = enqueue_labels(args.idempotency_key, check_idempotency_key, "--idempotency-key")
    tenant = enqueue_labels(args.tenant, check_tenant, "--tenant")
    pin = enqueue_labels(args.pin, check_pin, "--pin")
    timeout = _timeout(args.timeout) if args.timeout is not None else None
    if args.traceparent is not None and parse_traceparent(args.traceparent) is None:
        raise UsageError("--traceparent must look like 00-<32 hex>-<16 hex>-<2 hex>")
    config = resolve_store_config(settings)

    async def enqueue(client: ClientStore) -> int:
        with span(SPAN_ENQUEUE, parent=args.traceparent):
            return await _enqueue(client, current_traceparent())

    async def _enqueue(client: ClientStore, traceparent: str | None) -> int:
        result = await client.turns_enqueue(
            session_id=session_id,
            idempotency_key=key or str(uuid.uuid4()),
            turn_input=turn_input,
            tenant=tenant,
            pin=pin,
            timeout_seconds=timeout,
            busy=BusyStrategy(args.busy),
            # A session of another tenant is unknown here too, as from the API.
            within_tenant=tenant if session_id is not None else None,
            # With a key and no session, a retry must find the session, not make another.
            session_key=key if session_id is None else None,
            traceparent=traceparent,
        )
        print(json.dumps(result.as_json()))
        return 0

    return await _with_client(config, enqueue)


async def _enqueue_lines(settings: Settings, args: argparse.Namespace) -> int:
    """``stint enqueue --lines``: every line's turn in one transaction, all or none;
    one JSON line per turn queued, in input order."""
    if args.input_json is not None or args.session or args.idempotency_key:
        raise UsageError(
            "--lines reads every turn from stdin: give no INPUT_JSON, --session or "
            "--idempotency-key (each line has its own)"
        )
    if args.traceparent is not None and parse_traceparent(args.traceparent) is None:
        raise UsageError("--traceparent must look like 00-<32 hex>-<16 hex>-<2 hex>")
    defaults = LineDefaults(
        tenant=enqueue_labels(args.tenant, check_tenant, "--tenant"),
        pin=enqueue_labels(args.pin, check_pin, "--pin"),
        timeout_seconds=_timeout(args.timeout) if args.timeout is not None else None,
        busy=BusyStrategy(args.busy),
        traceparent=args.traceparent,
    )
    items = items_from_lines(
        read_text("-", sys.stdin.buffer),
        defaults,
        max_bytes=settings.max_input_bytes,
        max_depth=settings.max_input_depth,
    )

    async def enqueue(client: ClientStore) -> int:
        with span(SPAN_ENQUEUE, parent=args.traceparent):
            traceparent = current_traceparent()
            if traceparent is not None:
                items[:] = [replace(item, traceparent=traceparent) for item in items]
            results = await client.turns_enqueue_many(items)
        for result in results:
            print(json.dumps(result.as_json()))
        return 0

    return await _with_client(resolve_store_config(settings), enqueue)


async def cmd_tail(settings: Settings, args: argparse.Namespace) -> int:
    session_id = _parse_id(args.session)
    if args.after < 0:
        raise UsageError(f"--after must be 0 or more, not {args.after}")
    config = resolve_store_config(settings)

    async def tail(client: ClientStore) -> int:
        # UnknownSession: exit 2; with --follow, a lost connection is waited out.
        await look_up(
            lambda: client.session_status(session_id=session_id), config, follow=args.follow
        )
        bounds = await look_up(
            lambda: client.events_bounds(session_id=session_id), config, follow=args.follow
        )
        after = tail_start(bounds, args.after)

        def emit(event: dict[str, Any]) -> None:
            print(json.dumps(event), flush=True)

        following = follow_events(
            client,
            config,
            session_id=session_id,
            after=after,
            follow=args.follow,
            emit=emit,
            on_gap=tell_pruned,
        )
        if not args.follow:
            await following
        elif await until_stopped(following):  # SIGINT or SIGTERM, however inherited
            return EXIT_INTERRUPTED
        return 0

    return await _with_client(config, tail)


async def _with_controls(
    settings: Settings, action: Callable[[ControlStore], Awaitable[int]]
) -> int:
    config = resolve_store_config(settings)
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        return await action(ControlStore(config, pool))
    finally:
        await pool.close()


def cli_actor() -> dict[str, str | bool | None]:
    """Who acts from the command line: the OS user (the CLI holds no API key)."""
    try:
        user: str | None = getpass.getuser()
    except (KeyError, OSError):
        user = None
    return {"door": "cli", "user": user}


async def cmd_control(settings: Settings, args: argparse.Namespace) -> int:
    session_id = _parse_id(args.session)
    turn_id = _parse_id(args.turn, "turn") if getattr(args, "turn", None) else None
    reason = check_label("--reason", args.reason) or "operator"

    async def control(controls: ControlStore) -> int:
        result = await controls.control(
            session_id=session_id,
            action=ControlAction(args.command),
            reason=reason,
            turn_id=turn_id,
            actor=cli_actor(),
        )
        print(json.dumps(result.as_json()))
        return 0

    return await _with_controls(settings, control)


async def cmd_answer(settings: Settings, args: argparse.Namespace) -> int:
    session_id = _parse_id(args.session)
    step_key = check_label("STEP_KEY", args.step_key) or ""
    text = read_text(args.answer_json, sys.stdin.buffer)
    answer = parse_json(
        text, max_bytes=settings.max_input_bytes, max_depth=settings.max_input_depth
    )

    async def record(controls: ControlStore) -> int:
        result = await controls.answer(
            session_id=session_id, step_key=step_key, answer=answer, actor=cli_actor()
        )
        print(json.dumps(result.as_json()))
        return 0

    return await _with_controls(settings, record)


async def cmd_signal(settings: Settings, args: argparse.Namespace) -> int:
    session_id = _parse_id(args.session)
    name = check_signal_name(args.name, "NAME")
    key = enqueue_labels(args.idempotency_key, check_idempotency_key, "--idempotency-key")
    text = read_text(args.payload_json, sys.stdin.buffer) if args.payload_json else "null"
    payload = parse_json(
        text, max_bytes=settings.max_input_bytes, max_depth=settings.max_input_depth
    )

    async def send(controls: ControlStore) -> int:
        result = await controls.signal(
            session_id=session_id,
            name=name,
            idempotency_key=key or str(uuid.uuid4()),
            payload=payload,
            actor=cli_actor(),
        )
        print(json.dumps(result.as_json()))
        return 0

    return await _with_controls(settings, send)


async def cmd_show(settings: Settings, args: argparse.Namespace) -> int:
    session_id = _parse_id(args.session)
    turn_id = _parse_id(args.turn, "turn") if args.turn else None
    config = resolve_store_config(settings)
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        found = await UsageStore(config, pool).session_usage(session_id=session_id)
        tree = await ChildStore(config, pool, None).children_tree(session_id=session_id)
    finally:
        await pool.close()
    if found is None:
        raise UnknownSession(session=session_id)
    if turn_id is None:
        print(json.dumps(session_json(found, tree), indent=2))
        return 0
    turn = next((t for t in found.turns if t.turn_id == turn_id), None)
    if turn is None:
        raise UnknownTurn(session=session_id, turn=turn_id)
    print(json.dumps(turn_of_session_json(found, turn), indent=2))
    return 0


async def cmd_prune(settings: Settings, args: argparse.Namespace) -> int:
    """One retention run now, whatever the schedule; journals only when the
    workspace is on this machine."""
    config = resolve_store_config(settings)
    journals = workspace_dir(settings) / "journals"
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        report = await prune(
            RetentionStore(config, pool),
            RetentionPlan.from_settings(settings),
            journals=EffectJournal(journals) if journals.is_dir() else None,
            worker=f"stint-prune-{socket.gethostname()}",
            every_seconds=0,
        )
    finally:
        await pool.close()
    print(json.dumps(report.as_json()))
    return 0


async def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    config = resolve_store_config(settings)
    try:
        mcp = mcp_listing(settings)  # before the database: a bad file writes nothing anyway
    except McpConfigError as exc:
        raise UsageError(str(exc)) from None

    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        summary = await ClientStore(config, pool).status()
        admission = AdmissionStore(config, pool)
        limits = admission_json(
            await admission.admission_list(), await admission.admission_backlog()
        )
    finally:
        await pool.close()
    print(render_status(summary, limits, as_json=args.json, mcp=mcp))
    return 0


async def cmd_admission(settings: Settings, args: argparse.Namespace) -> int:
    config = resolve_store_config(settings)
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        return await run_admission(AdmissionStore(config, pool), args)
    finally:
        await pool.close()


async def cmd_check(settings: Settings, args: argparse.Namespace) -> int:
    config = resolve_store_config(settings)
    journals = workspace_dir(settings) / "journals"
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        report = await run_checks(pool, journals=journals, quiesced=not args.live)
    finally:
        await pool.close()
    if args.json:
        print(json.dumps(report.as_json(), indent=2, default=str))
    else:
        for check in report.checks:
            verdict = "pass" if check.passed else "FAIL"
            print(f"{verdict}  {check.name}  {json.dumps(check.evidence, default=str)}")
    return 0 if report.passed else 1


async def cmd_embedded(settings: Settings, args: argparse.Namespace) -> int:
    cluster = embedded_cluster(settings)
    if args.action == "start":
        handle = cluster.start()
        print(f"embedded PostgreSQL running at {handle.data_dir} (socket {handle.socket_dir})")
    elif args.action == "stop":
        stopped = cluster.stop()
        print("stopped" if stopped else "not running")
    else:
        print("running" if cluster.is_running() else "not running")
    return 0


def key_json(key: ApiKey) -> dict[str, Any]:
    return {
        "key_id": key.id,
        "tenant": key.tenant,
        "read_only": key.read_only,
        "operator": key.operator,
        "label": key.label,
        "created_at": key.created_at.isoformat(),
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


async def cmd_keys(settings: Settings, args: argparse.Namespace) -> int:
    """API keys: the token is printed once, at creation; only its hash is stored."""
    config = resolve_store_config(settings)
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        keys = KeyStore(config, pool)
        if args.action == "create":
            new = await keys.keys_create(
                tenant=args.tenant,
                read_only=args.read_only,
                label=args.label,
                operator=args.operator,
            )
            print(json.dumps({**key_json(new.key), "token": new.token}))
            print("stint keys: the token is shown only now; store it as a secret", file=sys.stderr)
        elif args.action == "list":
            for key in await keys.keys_list(tenant=args.tenant):
                print(json.dumps(key_json(key)))
        else:
            revoked = await keys.keys_revoke(key_id=args.key_id)
            if revoked is None:
                raise UsageError(f"no live key with id {args.key_id!r}")
            print(json.dumps(key_json(revoked)))
    finally:
        await pool.close()
    return 0


def cmd_api(settings: Settings, args: argparse.Namespace) -> int:
    """Runs its own event loop (uvicorn's), so it is not a coroutine like the others."""
    try:
        from stint.api.server import serve
    except ImportError as exc:
        raise UsageError(
            f"the HTTP API needs the api extra: pip install 'stint[api]' ({exc})"
        ) from None
    return serve(settings)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="stint",
        description=(
            "Operate Stint, the PostgreSQL-backed durable agent worker service. Without "
            "STINT_DATABASE_URL every command uses the embedded PostgreSQL."
        ),
    )
    parser.add_argument("--version", action="version", version=f"stint {package_version('stint')}")
    add_setting(parser, "--database-url", "database_url", metavar="URL")
    add_setting(parser, "--schema", "db_schema", metavar="NAME")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("migrate", help="apply pending schema migrations and say what was done")
    p.set_defaults(run=cmd_migrate)

    p = sub.add_parser(
        "enqueue",
        help="queue one turn (creates a session without --session); exit 3 when an admission "
        "limit (stint admission) refuses it",
    )
    p.add_argument(
        "input_json",
        metavar="INPUT_JSON",
        nargs="?",
        help="the turn input, a JSON object; - reads stdin",
    )
    p.add_argument(
        "--lines",
        action="store_true",
        help="read many turns from stdin, one JSON object a line: "
        '{"input": {...}, "session": ID?, "idempotency_key": K?}; all are queued in one '
        f"transaction or none is (at most {MAX_BATCH_TURNS}); one JSON line out per turn",
    )
    p.add_argument("--session", metavar="ID", help="an existing session's id")
    p.add_argument(
        "--idempotency-key",
        metavar="K",
        help="a retry with the same key returns the same turn; without --session, the same "
        "session too (keys are per tenant; default: a random key)",
    )
    p.add_argument("--pin", metavar="P", help="new session only: workers need --pin P to run it")
    p.add_argument("--tenant", metavar="T", help="new session only: tenant label")
    p.add_argument(
        "--timeout",
        metavar="S",
        help="interrupt this turn after S seconds, 0.1..86400 (default STINT_TURN_TIMEOUT)",
    )
    p.add_argument(
        "--traceparent",
        metavar="TP",
        help="the producer's W3C trace context (00-<trace id>-<span id>-<flags>): the worker's "
        "spans for this turn join that trace (default: a stint.enqueue span's, with "
        "STINT_TRACING on)",
    )
    p.add_argument(
        "--busy",
        choices=[strategy.value for strategy in BusyStrategy],
        default="enqueue",
        help="if a turn is in progress: queue behind it (default), reject this input "
        "(exit 3), or interrupt the running turn and run this one next",
    )
    p.set_defaults(run=cmd_enqueue)

    for name, what in (
        (
            "cancel",
            "cancel the session's queued turns (or --turn) and its running turn, "
            "and its cascade children's",
        ),
        (
            "interrupt",
            "interrupt the session's running turn and its cascade children's turns; "
            "queued turns go on",
        ),
    ):
        p = sub.add_parser(name, help=what)
        p.add_argument("session", metavar="SESSION", help="the session's id")
        if name == "cancel":
            p.add_argument("--turn", metavar="ID", help="only this turn")
        p.add_argument("--reason", default="operator", help="recorded with the turn (operator)")
        p.set_defaults(run=cmd_control)

    p = sub.add_parser("answer", help="answer a parked turn's question; the turn resumes")
    p.add_argument("session", metavar="SESSION", help="the session's id")
    p.add_argument("step_key", metavar="STEP_KEY", help="from the approval.requested event")
    p.add_argument(
        "answer_json",
        metavar="ANSWER_JSON",
        help="the answer, any JSON value; - reads stdin. Answering again with the same "
        "value is a retry (exit 0); another value is refused (exit 2)",
    )
    p.set_defaults(run=cmd_answer)

    p = sub.add_parser(
        "signal", help="send a signal: kept until a wait on its name (ctx.wait_for) takes it"
    )
    p.add_argument("session", metavar="SESSION", help="the session's id")
    p.add_argument("name", metavar="NAME", help="the signal's name (letters, digits, . _ : -)")
    p.add_argument(
        "payload_json",
        metavar="PAYLOAD_JSON",
        nargs="?",
        help="what the signal carries, any JSON value (default null); - reads stdin",
    )
    p.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="a retry with the same key sends nothing more (exit 0); with another name or "
        "payload it is refused (exit 2)",
    )
    p.set_defaults(run=cmd_signal)

    p = sub.add_parser("tail", help="print a session's events as JSON lines")
    p.add_argument("session", metavar="SESSION", help="the session's id")
    p.add_argument("--after", type=int, default=0, metavar="N", help="start after seq N")
    p.add_argument("--follow", action="store_true", help="keep streaming until interrupted")
    p.set_defaults(run=cmd_tail)

    p = sub.add_parser(
        "show", help="a session's turns (status, output, error) and model usage, as JSON"
    )
    p.add_argument("session", metavar="SESSION", help="the session's id")
    p.add_argument("--turn", metavar="ID", help="only this turn (with the session's totals)")
    p.set_defaults(run=cmd_show)

    p = sub.add_parser(
        "prune",
        help="remove history older than its retention now (STINT_RETAIN_*), in small batches",
    )
    add_setting(p, "--workspace", "workspace", type=Path, metavar="DIR")
    p.set_defaults(run=cmd_prune)

    p = sub.add_parser(
        "status", help="workers, sessions by status, queued turns, admission limits and usage"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(run=cmd_status)

    p = sub.add_parser(
        "check",
        help="verify Stint's invariants (cursors, effects, turns, leases); exit 1 on failure",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--live", action="store_true", help="work is still running: skip the quiesced-only checks"
    )
    add_setting(p, "--workspace", "workspace", type=Path, metavar="DIR")
    p.set_defaults(run=cmd_check)

    p = sub.add_parser("embedded", help="start, stop or check the embedded PostgreSQL")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(run=cmd_embedded)

    p = sub.add_parser("keys", help="create, list or revoke API keys for the HTTP API")
    keys_sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    k = keys_sub.add_parser("create", help="a new key for a tenant; prints its token once")
    k.add_argument("--tenant", required=True, metavar="T", help="the tenant the key acts for")
    k.add_argument("--read-only", action="store_true", help="the key may read, not write")
    k.add_argument(
        "--operator",
        action="store_true",
        help="the dashboard shows this key every tenant, and it may read the API's /metrics",
    )
    k.add_argument("--label", metavar="L", help="a note for operators (who holds it)")
    k = keys_sub.add_parser("list", help="keys as JSON lines (never their tokens)")
    k.add_argument("--tenant", metavar="T", help="only this tenant's keys")
    k = keys_sub.add_parser("revoke", help="revoke a key at once")
    k.add_argument("key_id", metavar="KEY_ID", help="from keys create or keys list")
    p.set_defaults(run=cmd_keys)

    add_quota_parser(sub)
    add_admission_parser(sub).set_defaults(run=cmd_admission)
    add_schedule_parser(sub)
    add_webhook_parser(sub)

    p = sub.add_parser(
        "api",
        help="serve the HTTP API (needs the api extra); SIGTERM stops it",
        description="Serve Stint's HTTP API with uvicorn (uvloop, httptools). Every option "
        "has a STINT_API_* variable; the flag wins.",
    )
    add_setting(p, "--host", "api_host", metavar="ADDR")
    add_setting(p, "--port", "api_port", type=int, metavar="PORT")
    p.set_defaults(run=cmd_api, blocking=True)

    add_size_parser(sub)
    parser.epilog = exit_codes_epilog(
        COMMON,
        heading="exit codes of every command:",
        also="and each command's own (0 among them): stint COMMAND --help",
    )
    for name, command in sub.choices.items():
        if name in COMMANDS:
            command.epilog = exit_codes_epilog(COMMANDS[name], also=_ALSO)
    return parser


def _stdout_gone() -> int:
    """The reader closed our standard output (``stint tail S | head -1``): stop
    quietly, and keep the interpreter's final flush from raising again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_PIPE_CLOSED


def _run(settings: Settings, args: argparse.Namespace) -> int:
    try:
        if getattr(args, "blocking", False):
            blocking: int = args.run(settings, args)
            return blocking
        code: int = uvloop.run(args.run(settings, args))
        sys.stdout.flush()
        return code
    except (UsageError, InvalidInput) as exc:
        print(f"stint {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (AdmissionRefused, SessionBusy) as exc:
        print(f"stint {args.command}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except StoreError as exc:
        print(f"stint {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        return _stdout_gone()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    try:
        check_argv(raw)
    except UsageError as exc:
        print(f"stint: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args = build_parser().parse_args(raw)
    try:
        settings = load_settings(
            **overrides_from(args, "database_url", "db_schema", "workspace", "api_host", "api_port")
        )
    except SettingsError as exc:
        print(f"stint: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    setup_logging(settings.log_level, secrets=settings.secrets(), fmt=settings.log_format)
    for warning in unknown_variables():
        log.warning("%s", warning)
    try:
        setup_tracing(
            settings.tracing, service_name="stint-api" if args.command == "api" else "stint-cli"
        )
    except TracingUnavailable as exc:
        print(f"stint: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _run(settings, args)


if __name__ == "__main__":
    sys.exit(main())
