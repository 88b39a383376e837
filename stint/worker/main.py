"""``worker``: one worker process with N slots, until SIGTERM/SIGINT (then it drains)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version as package_version
from pathlib import Path

import uvloop

from stint.config.logs import bind_process_fields, setup_logging
from stint.config.options import (
    ExitCodes,
    HelpFormatter,
    add_setting,
    exit_codes_epilog,
    overrides_from,
)
from stint.config.settings import Settings, SettingsError, load_settings, unknown_variables
from stint.config.target import resolve_store_config, workspace_dir
from stint.store.children import ChildStore
from stint.store.config import ROLE_BACKGROUND, ROLE_LISTEN, ROLE_WORKER, StoreConfig
from stint.store.errors import StoreError, WorkerIdInUse
from stint.store.listen import Listener
from stint.store.migrate import check_schema, migrate
from stint.store.models import QuotaScope
from stint.store.pool import Pool, open_pool, ping, wait_for_database
from stint.store.schedules import ScheduleStore
from stint.store.sealed import WebhookKey
from stint.store.stats import StatsStore
from stint.store.webhooks import WebhookStore
from stint.store.worker_store import SqlWorkerStore
from stint.telemetry.tracing import TracingUnavailable
from stint.worker.deliverer import Deliverer, DeliveryPlan
from stint.worker.egress import parse_networks
from stint.worker.failpoints import configure as configure_failpoints
from stint.worker.harness import HarnessLoadError, close_harness, load_harness
from stint.worker.health import Exposition, HealthServerError, HealthState, serve_health
from stint.worker.journal import EffectJournal, private_dir
from stint.worker.pruner import Pruner, RetentionPlan
from stint.worker.runner import Limits
from stint.worker.scheduler import Scheduler, SchedulerPlan
from stint.worker.supervisor import (
    ChoreFactory,
    FailureHandler,
    Identity,
    Supervisor,
    WorkerPlan,
    new_worker_id,
)
from stint.worker.telemetry import enable_metrics, setup_tracing

__all__ = ["main"]

log = logging.getLogger("stint.worker")

_READY_PROBE_SECONDS = 1.0  # /readyz: the database answers within this, or it is not ready

_FIELDS = (
    "slots",
    "database_url",
    "db_schema",
    "harness",
    "lease_seconds",
    "poll_interval",
    "drain_seconds",
    "pins",
    "workspace",
    "worker_id",
)


EXIT_CODES: ExitCodes = (
    (0, "drained and stopped"),
    (1, "cannot run (the database, a migration, the harness) or a service failed"),
    (2, "bad configuration, or its STINT_WORKER_ID is in use by a live worker"),
)
"""What ``worker`` exits with (its ``--help`` and docs/reference/cli.md show them)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="worker",
        formatter_class=HelpFormatter,
        epilog=exit_codes_epilog(EXIT_CODES),
        description=(
            "Run one Stint worker: claim agent sessions from PostgreSQL through leased "
            "rows and run their turns in SLOTS concurrent slots. SIGTERM or SIGINT drains "
            "(finish running turns within --drain-seconds, then hand the rest back); a "
            "second signal skips the wait. Every option has a STINT_* variable; the "
            "flag wins."
        ),
    )
    parser.add_argument(
        "--version", action="version", version=f"worker (stint) {package_version('stint')}"
    )
    add_setting(parser, "--slots", "slots", type=int, metavar="N")
    add_setting(parser, "--database-url", "database_url", metavar="URL")
    add_setting(parser, "--schema", "db_schema", metavar="NAME")
    add_setting(parser, "--harness", "harness", metavar="MODULE:OBJECT")
    add_setting(parser, "--lease-seconds", "lease_seconds", type=float, metavar="S")
    add_setting(parser, "--poll-interval", "poll_interval", type=float, metavar="S")
    add_setting(parser, "--drain-seconds", "drain_seconds", type=float, metavar="S")
    add_setting(parser, "--pin", "pins", action="append", metavar="PIN")
    add_setting(parser, "--workspace", "workspace", type=Path, metavar="DIR")
    add_setting(parser, "--worker-id", "worker_id", metavar="ID")
    return parser


@asynccontextmanager
async def _runtime_store(settings: Settings, config: StoreConfig) -> AsyncIterator[SqlWorkerStore]:
    """The worker's store over one small pool, opened in full at start so the first
    turns do not wait for connections; whatever the slot count, the worker holds
    ``pool_size`` connections plus the listener's. Batches of slot writes may use
    all but one of them: the last stays free for lease renewals, which must never
    queue behind slot writes (a renewal late by a lease fences the worker)."""
    size = settings.pool_size
    pool = await open_pool(config, ROLE_WORKER, min_size=size, max_size=size)
    store = SqlWorkerStore(config, pool, concurrency=max(1, size - 1))
    try:
        yield store
    finally:
        await store.close()
        await pool.close()


def _chores(
    settings: Settings, store: SqlWorkerStore, journals: EffectJournal, identity: Identity
) -> list[ChoreFactory]:
    """Retention on a schedule, unless STINT_PRUNE_INTERVAL is 0."""
    if not settings.prune_interval:
        return []
    plan = RetentionPlan.from_settings(settings)

    def pruner(on_failure: FailureHandler) -> Pruner:
        return Pruner(
            store=store.retention,
            plan=plan,
            journals=journals,
            worker=identity.worker_id,
            on_failure=on_failure,
        )

    return [pruner]


@asynccontextmanager
async def _background_pool(settings: Settings, config: StoreConfig) -> AsyncIterator[Pool | None]:
    """The schedules' and webhooks' own pool (at most two connections, each opened when
    first needed), apart from the slots' pool, so neither ever takes or waits for a
    connection a turn needs, and a full or unreachable server never stops the worker's
    start for them; None when this worker runs neither."""
    if not settings.schedule_poll_seconds and not settings.webhook_poll_seconds:
        yield None
        return
    pool = await open_pool(config, ROLE_BACKGROUND, min_size=0, max_size=2, wait=False)
    try:
        yield pool
    finally:
        await pool.close()


def _background_chores(
    settings: Settings, config: StoreConfig, pool: Pool | None, identity: Identity
) -> list[ChoreFactory]:
    """The scheduler and the webhook deliverer, each unless its poll setting is 0."""
    chores: list[ChoreFactory] = []
    if pool is None:
        return chores
    if settings.schedule_poll_seconds:
        plan = SchedulerPlan(
            poll_seconds=settings.schedule_poll_seconds,
            grace_seconds=settings.schedule_grace_seconds,
        )

        def scheduler(on_failure: FailureHandler) -> Scheduler:
            return Scheduler(
                store=ScheduleStore(config, pool),
                plan=plan,
                worker=identity.worker_id,
                on_failure=on_failure,
                children=ChildStore(config, pool, None),
            )

        chores.append(scheduler)
    if settings.webhook_poll_seconds:
        encoded = settings.webhook_key.get_secret_value()
        key = WebhookKey(encoded) if encoded else None
        delivery = DeliveryPlan(
            poll_seconds=settings.webhook_poll_seconds,
            concurrency=settings.webhook_concurrency,
            timeout_seconds=settings.webhook_timeout_seconds,
            retry_seconds=settings.webhook_retry_seconds,
            retry_max_seconds=settings.webhook_retry_max_seconds,
            max_attempts=settings.webhook_max_attempts,
            disable_after_seconds=settings.webhook_disable_after_seconds,
            networks=parse_networks(settings.webhook_allowed_networks),
        )

        def deliverer(on_failure: FailureHandler) -> Deliverer:
            return Deliverer(
                store=WebhookStore(config, pool),
                key=key,
                plan=delivery,
                worker=identity.worker_id,
                on_failure=on_failure,
            )

        chores.append(deliverer)
    return chores


def _plan(settings: Settings, config: StoreConfig) -> WorkerPlan:
    return WorkerPlan(
        slots=settings.slots,
        pins=settings.pins,
        lease_seconds=settings.lease_seconds,
        poll_interval=settings.poll_interval,
        drain_seconds=settings.drain_seconds,
        work_channel=config.work_channel,
        sample_seconds=settings.sample_seconds,
        reconnect_max=settings.reconnect_max_seconds,
        limits=Limits(
            turn_timeout=settings.turn_timeout,
            max_turns_per_claim=settings.max_turns_per_claim,
            max_claim_seconds=settings.max_claim_seconds,
        ),
    )


async def _serve(settings: Settings) -> int:
    """Serve health at once, wait for the database (however long: SIGTERM ends
    the wait, exit 0), then run the worker until it is stopped."""
    config = resolve_store_config(settings)
    identity = Identity(settings.worker_id or new_worker_id(), package_version("stint"))
    bind_process_fields(worker=identity.worker_id)  # on every JSON log line from here on
    health = HealthState(lease_seconds=settings.lease_seconds)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    late = _LateMetrics()
    metrics = late.render if settings.metrics and settings.serves_health() else None
    port_file = Path(settings.health_port_file) if settings.health_port_file else None
    async with serve_health(settings.health_port, health, metrics, port_file=port_file):
        health.waiting_for_database("connecting")
        if not await wait_for_database(
            config, ROLE_WORKER, stop=stop, on_failure=health.waiting_for_database
        ):
            log.info("stopped while waiting for the database")
            return 0
        return await _run_worker(settings, config, identity, health, stop, late)


class _LateMetrics:
    """/metrics before the worker has its metrics (while it waits for the
    database): an empty page; then the worker's."""

    def __init__(self) -> None:
        self.exposition: Exposition | None = None

    def render(self) -> tuple[bytes, str]:
        if self.exposition is None:
            return b"", "text/plain; version=0.0.4; charset=utf-8"
        return self.exposition()


async def _run_worker(
    settings: Settings,
    config: StoreConfig,
    identity: Identity,
    health: HealthState,
    stop: asyncio.Event,
    late: _LateMetrics,
) -> int:
    if settings.auto_migrate:
        applied = await migrate(config, app_role=settings.app_role or None)
        for migration in applied:
            log.info("applied migration %s", migration.label)
    else:
        await check_schema(config)
    workspace = workspace_dir(settings)
    private_dir(workspace)
    harness = load_harness(settings.harness, workspace=workspace, settings=settings)
    channels = [config.work_channel, config.control_channel]
    async with (
        _runtime_store(settings, config) as store,
        _background_pool(settings, config) as background,
    ):
        chores = [
            *_chores(settings, store, EffectJournal(workspace / "journals"), identity),
            *_background_chores(settings, config, background, identity),
        ]
        supervisor = Supervisor(
            _plan(settings, config),
            store=store,
            subscribe=lambda: Listener(config, channels=channels, role=ROLE_LISTEN),
            harness=harness,
            identity=identity,
            chores=chores,
            stats=StatsStore(config, store.pool),
            health=health,
        )
        health.probe = lambda: ping(store.pool, within=_READY_PROBE_SECONDS)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, supervisor.request_stop)
        if stop.is_set():  # a signal came while the worker was starting
            supervisor.request_stop()
        late.exposition = _metrics(settings, supervisor, store, identity.version)
        try:
            return await supervisor.run()
        finally:
            await close_harness(harness)


def _metrics(
    settings: Settings, supervisor: Supervisor, store: SqlWorkerStore, version: str
) -> Exposition | None:
    """The worker's /metrics, when it serves a health port and metrics are on;
    otherwise ``stint.telemetry.metrics`` is never imported."""
    if not (settings.metrics and settings.serves_health()):
        return None
    from stint.telemetry.metrics import (
        CONTENT_TYPE,
        PoolFigures,
        QueueFigures,
        QuotaBooks,
        WorkerState,
        render,
    )

    def books(scope: QuotaScope) -> QuotaBooks:
        """A quota scope's counters as the metrics label them."""
        return QuotaBooks(
            scope=scope.scope,
            requests={
                "reserved": scope.requests_reserved,
                "reconciled": scope.requests_reconciled,
                "unknown": scope.requests_unknown,
            },
            tokens={
                "reserved": scope.tokens_reserved,
                "reconciled": scope.tokens_reconciled,
                "refunded": scope.tokens_refunded,
                "debt": scope.tokens_debt,
                "unknown": scope.tokens_unknown,
            },
            in_flight={"requests": scope.requests_in_flight, "tokens": scope.tokens_in_flight},
            window={"requests": scope.window_requests, "tokens": scope.window_tokens},
            deferrals=scope.deferrals,
        )

    def state() -> WorkerState:
        stats = store.batcher.stats
        sampler = supervisor.sampler
        sample = sampler.latest if sampler is not None else None
        queue = None
        if sampler is not None and sample is not None:
            queue = QueueFigures(
                age_seconds=sample.age + sampler.sample_age(),
                ready_sessions=sample.ready_sessions,
                queued_turns=sample.queued_turns,
                running_turns=sample.running_turns,
                parked_turns=sample.parked_turns,
                oldest_ready_age=sample.oldest_ready_age,
                live_workers=sample.live_workers,
                total_slots=sample.total_slots,
                busy_slots=sample.busy_slots,
                quotas=tuple(books(q) for q in sampler.quotas),
            )
        slots = supervisor.slots
        pool = store.pool.get_stats()
        return WorkerState(
            slots=slots.capacity,
            busy=slots.capacity - slots.free,
            batches=stats.batches,
            statements=stats.statements,
            rerun_alone=stats.rerun_alone,
            largest_batch=stats.largest,
            leader=sampler is not None and sampler.leader,
            pool=PoolFigures(
                connections=pool.get("pool_size", 0),
                idle=pool.get("pool_available", 0),
                waiting=pool.get("requests_waiting", 0),
                requests=pool.get("requests_num", 0),
                queued=pool.get("requests_queued", 0),
                wait_seconds=pool.get("requests_wait_ms", 0) / 1000,
            ),
            queue=queue,
        )

    registry = enable_metrics(version=version, state=state).registry
    return lambda: (render(registry), CONTENT_TYPE)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(**overrides_from(args, *_FIELDS))
    except SettingsError as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.log_level, secrets=settings.secrets(), fmt=settings.log_format)
    for warning in unknown_variables():
        log.warning("%s", warning)
    try:
        setup_tracing(settings.tracing, service_name="stint-worker")
    except TracingUnavailable as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2
    try:
        configure_failpoints(settings.failpoints)
    except ValueError as exc:
        print(f"worker: STINT_FAILPOINTS: {exc}", file=sys.stderr)
        return 2
    if settings.failpoints:
        log.warning("failpoints enabled: %s", settings.failpoints)
    try:
        return uvloop.run(_serve(settings))
    except WorkerIdInUse as exc:
        log.error("worker cannot run: %s", exc)
        return 2
    except (StoreError, HarnessLoadError, HealthServerError) as exc:
        log.error("worker cannot run: %s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
