"""The one Settings object: every ``STINT_*`` variable, its default and its bounds.

Built once in each entry point (``worker``, ``stint``) and passed down; nothing
deeper reads the environment. A bad value stops the program at start with a
message naming the variable and what it accepts. The rules are Stint's own
(``stint.config.fields``), not pydantic's: a worker imports no pydantic.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from stint.config.fields import (
    FieldSpec,
    Secret,
    ValueRejected,
    convert,
    setting,
    setting_list,
    spec_of,
)
from stint.errors import StintError
from stint.store.config import StoreConfig, validate_role_name, validate_schema_name
from stint.store.conninfo import parse_conninfo
from stint.store.errors import ConfigError
from stint.store.sealed import WebhookKey

__all__ = [
    "SettingInfo",
    "Settings",
    "SettingsError",
    "env_name",
    "field_range",
    "load_settings",
    "setting_infos",
    "unknown_variables",
]

_DEFAULT_HARNESS = "stint.worker.scripted:harness"
_SECRET_FIELDS = frozenset({"database_url", "model_api_key", "webhook_key"})


class SettingsError(StintError):
    """A STINT_* value is out of range or malformed; the message names the variable."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Stint's configuration, from ``STINT_*`` environment variables and CLI overrides."""

    database_url: Secret = setting(
        Secret(""), description="PostgreSQL URL; empty uses the embedded PostgreSQL"
    )
    database_url_file: Path | None = setting(
        None,
        description="file holding the PostgreSQL URL (the container convention for secrets); "
        "not with STINT_DATABASE_URL",
    )
    app_role: str = setting(
        "",
        description="role `stint migrate` grants the worker/API privileges to (DML only); "
        "empty grants nothing",
    )
    db_schema: str = setting(
        "stint",
        env="STINT_SCHEMA",
        description="schema holding Stint's tables",
    )
    pool_size: int = setting(
        2,
        ge=1,
        le=64,
        description="connections a worker's slots, claims and renewals share (plus one LISTEN)",
    )
    statement_timeout: float = setting(5.0, ge=0.1, le=3600, description="seconds per statement")
    lock_timeout: float = setting(5.0, ge=0.1, le=3600, description="seconds waiting for a lock")
    connect_timeout: float = setting(
        10.0, ge=1, le=300, description="seconds to open a connection or get one from a pool"
    )
    idle_in_transaction_timeout: float = setting(
        30.0, ge=1, le=3600, description="seconds a transaction may sit idle"
    )
    reconnect_max_seconds: float = setting(
        1.0,
        ge=0.05,
        le=60,
        description=(
            "longest wait between attempts to reach PostgreSQL again after losing it "
            "(pools, LISTEN, claims), so recovery after an outage waits at most this long"
        ),
    )
    data_dir: Path | None = setting(
        None,
        description="embedded cluster folder (unset: /var/lib/stint as root, else the user's "
        "data directory)",
    )
    pg_bindir: Path | None = setting(
        None, description="PostgreSQL server binaries folder (unset: searched for)"
    )
    pg_run_as: str = setting("postgres", description="user the embedded server runs as under root")
    auto_migrate: bool = setting(True, description="workers apply pending migrations on start")

    slots: int = setting(4, ge=1, le=256, description="turns one worker runs at once")
    harness: str = setting(_DEFAULT_HARNESS, description="agent loop, as module:object")
    lease_seconds: float = setting(
        30.0, ge=0.5, le=3600, description="session lease length, seconds (renewed every third)"
    )
    poll_interval: float = setting(
        0.25, ge=0.01, le=60, description="claim poll fallback, seconds (NOTIFY wakes sooner)"
    )
    drain_seconds: float = setting(30.0, ge=0, le=3600, description="SIGTERM grace for turns")
    pins: list[str] = setting_list(description="compatibility pins this worker accepts")
    workspace: Path | None = setting(
        None, description="folder of native effect journals (unset: workspace in the data folder)"
    )
    turn_timeout: float = setting(
        600.0, ge=0.1, le=86_400, description="seconds a turn may run before it is interrupted"
    )
    max_turns_per_claim: int = setting(
        8, ge=1, le=100_000, description="turns a session runs before giving its slot up"
    )
    retain_events_days: float = setting(
        30.0, ge=0, le=36_500, description="days events of finished turns are kept; 0 keeps them"
    )
    retain_turns_days: float = setting(
        30.0,
        ge=0,
        le=36_500,
        description="days finished turns (steps, messages, journals) are kept; 0 keeps them",
    )
    retain_workers_days: float = setting(
        7.0, ge=0, le=36_500, description="days rows of stopped workers are kept; 0 keeps them"
    )
    retain_idle_sessions_days: float = setting(
        30.0,
        ge=0,
        le=36_500,
        description="days an idle session with no turn left is kept after its last change; "
        "0 keeps them",
    )
    prune_interval: float = setting(
        3600.0, ge=0, le=86_400 * 7, description="seconds between a worker's prune runs; 0 is off"
    )
    prune_batch: int = setting(1000, ge=10, le=100_000, description="turns pruned per transaction")
    max_claim_seconds: float = setting(
        60.0, ge=0.1, le=86_400, description="seconds a session keeps a slot while others wait"
    )
    failpoints: str = setting(
        "", description="fault tests only: name:kill|pause:S|raise,... (see worker.failpoints)"
    )
    worker_id: str = setting("", description="worker identity; empty generates host-pid-random")
    log_level: str = setting(
        "INFO", pattern=r"(?i)^(debug|info|warning|error)$", description="log level"
    )
    max_input_bytes: int = setting(
        262_144, ge=256, le=16_777_216, description="largest turn input (or answer) in bytes"
    )
    health_port: int = setting(
        0, ge=0, le=65535, description="port serving /livez, /readyz and /metrics; 0 means off"
    )
    health_port_file: str = setting(
        "",
        description=(
            "write the health port to this file once it is served; with health_port 0 the"
            " worker then serves on a loopback port the OS picks (several workers sharing a"
            " host network, each probed inside its own container)"
        ),
    )
    log_format: str = setting(
        "text", pattern=r"^(text|json)$", description="log lines as text, or one JSON object each"
    )
    tracing: str = setting(
        "off",
        pattern=r"^(off|console|otlp)$",
        description="OpenTelemetry spans: off, console, or otlp (needs the otlp extra)",
    )
    metrics: bool = setting(
        True, description="a worker serves Prometheus /metrics on its health port"
    )
    sample_seconds: float = setting(
        5.0,
        ge=0,
        le=3600,
        description="seconds between the elected worker's queue samples; 0 means none",
    )
    api_metrics_public: bool = setting(
        False, description="serve the API's /metrics without an operator key"
    )

    api_host: str = setting("127.0.0.1", description="address the HTTP API listens on")
    api_port: int = setting(8000, ge=1, le=65_535, description="port the HTTP API listens on")
    api_pool_size: int = setting(
        8, ge=1, le=200, description="API connections for request handlers"
    )
    api_follow_pool_size: int = setting(
        4, ge=1, le=200, description="API connections for event followers' catch-up reads"
    )
    api_max_body_bytes: int = setting(
        1_048_576, ge=1024, le=67_108_864, description="largest HTTP request body accepted"
    )
    api_keepalive_seconds: float = setting(
        15.0, ge=0.05, le=3600, description="seconds between keepalive comments on an idle stream"
    )
    api_retry_after_seconds: int = setting(
        1, ge=1, le=3600, description="Retry-After sent with 429 and 503 answers"
    )
    api_max_followers: int = setting(
        2_000, ge=1, le=20_000, description="event streams one API process serves at once"
    )
    api_shutdown_seconds: int = setting(
        5, ge=0, le=3600, description="SIGTERM grace for open requests and streams"
    )
    # Connection hygiene and memory bounds of `stint api` (issue 22): each has a safe
    # default, so an API with no proxy in front survives slow and hostile clients.
    api_max_header_bytes: int = setting(
        65_536,
        ge=4096,
        le=1_048_576,
        description="largest request head (request line and headers) accepted; 431 beyond",
    )
    api_header_seconds: float = setting(
        10.0,
        ge=0.1,
        le=600,
        description="seconds a connection may take to send a request's head; 408 or close beyond",
    )
    api_idle_seconds: int = setting(
        5, ge=1, le=3600, description="seconds a kept-alive connection may idle between requests"
    )
    api_max_connections: int = setting(
        2_000,
        ge=16,
        le=100_000,
        description="open connections one API process keeps (also capped by its file "
        "descriptor limit); past it the oldest connection with no request in progress is closed",
    )
    api_max_requests: int = setting(
        128,
        ge=1,
        le=10_000,
        description="requests one API process works on at once (open event streams not "
        "counted); 503 beyond",
    )
    api_stream_page_bytes: int = setting(
        262_144,
        ge=65_536,
        le=67_108_864,
        description="bytes of events one stream reads from PostgreSQL at a time",
    )
    api_stream_budget_bytes: int = setting(
        16_777_216,
        ge=65_536,
        le=4_294_967_296,
        description="bytes of events all of one API process's streams hold in memory at once",
    )
    api_send_buffer_bytes: int = setting(
        262_144,
        ge=0,
        le=67_108_864,
        description="the kernel's send buffer of each API connection (SO_SNDBUF), so a client "
        "that stops reading holds little kernel memory and is soon found out; 0 leaves it to "
        "the kernel, which grows it up to net.ipv4.tcp_wmem's maximum (4 MiB) per connection",
    )
    api_stream_drain_seconds: float = setting(
        30.0,
        ge=0.1,
        le=3600,
        description="seconds a stream's client may take to take what was sent; its stream is "
        "then closed (it resumes by Last-Event-ID)",
    )

    dashboard_session_seconds: int = setting(
        43_200,
        ge=60,
        le=2_592_000,
        description="a dashboard sign-in lasts this long (then, or at sign-out, or when its "
        "key is revoked, the browser signs in again)",
    )
    dashboard_insecure_cookie: bool = setting(
        False,
        description="send the dashboard's cookie over plain HTTP although the API listens "
        "beyond loopback (it is Secure there by default: put TLS in front instead)",
    )

    # The agents harness (stint.agents:chat); read only when it is the harness.
    model_base_url: str = setting(
        "https://api.openai.com/v1", description="OpenAI-compatible API base URL"
    )
    model: str = setting(
        "", description="model name sent to the provider (the agents harness needs it)"
    )
    model_api_key: Secret = setting(Secret(""), description="provider API key")
    model_api_key_file: Path | None = setting(
        None, description="file holding the API key (not with STINT_MODEL_API_KEY)"
    )
    model_timeout: float = setting(
        120.0, ge=1, le=3600, description="seconds to connect, or between streamed bytes"
    )
    model_max_attempts: int = setting(
        6, ge=1, le=100, description="provider attempts per model call (429, 5xx, resets)"
    )
    model_retry_max_wait: float = setting(
        60.0, ge=0, le=3600, description="longest wait before one provider retry, seconds"
    )
    model_quota_scope: str = setting(
        "",
        pattern=r"^([A-Za-z0-9][A-Za-z0-9._:/-]{0,99})?$",
        description="quota scope the model calls count against (`stint quota set`); "
        "empty: no quota",
    )
    quota_wait_in_place: float = setting(
        2.0,
        ge=0,
        le=60,
        description="longest a model call waits for quota in its slot; longer hands the turn back",
    )
    quota_chars_per_token: float = setting(
        3.0, ge=0.5, le=32, description="request characters the quota estimate counts as a token"
    )
    quota_output_tokens: int = setting(
        1024,
        ge=0,
        le=1_000_000,
        description="completion tokens the quota estimate assumes without a max_tokens",
    )
    agent_tools: str = setting(
        "stint.agents.demo_tools:TOOLS", description="tool registry, as module:object"
    )
    agent_system_prompt: str = setting(
        "You are a helpful assistant. Use the tools when they help.",
        description="system message sent first on every model call",
    )
    agent_max_iterations: int = setting(
        8, ge=1, le=1000, description="model calls one turn may make"
    )
    agent_history_messages: int = setting(
        200, ge=0, le=100_000, description="earlier messages loaded per turn; older are cut"
    )
    mcp_servers: Path | None = setting(
        None,
        description="JSON file naming the MCP servers whose tools the agents harness and "
        "the adapters offer (docs/guide/adapters.md)",
    )
    stream_flush_ms: int = setting(
        50, ge=1, le=10_000, description="longest a token delta waits before it is written"
    )
    stream_flush_deltas: int = setting(
        50, ge=1, le=10_000, description="token deltas written at most per event"
    )
    max_input_depth: int = setting(
        64, ge=1, le=512, description="deepest JSON nesting accepted in a turn input or answer"
    )

    # Schedules and webhooks (run by every worker; docs/guide/schedules-webhooks.md).
    schedule_poll_seconds: float = setting(
        1.0,
        ge=0,
        le=60,
        description="longest a worker's scheduler waits between looks for due schedules; "
        "0: this worker runs no schedules",
    )
    schedule_grace_seconds: float = setting(
        60.0,
        ge=1,
        le=86_400,
        description="a tick this many seconds late still runs; older ticks are missed and only "
        "each schedule's catch-up count of them runs",
    )
    webhook_key: Secret = setting(
        Secret(""),
        description="32 random bytes in base64 that seal webhook signing secrets at rest; "
        "without it no webhook endpoint is created and workers deliver none",
    )
    webhook_key_file: Path | None = setting(
        None, description="file holding STINT_WEBHOOK_KEY (not with STINT_WEBHOOK_KEY)"
    )
    webhook_poll_seconds: float = setting(
        1.0,
        ge=0,
        le=60,
        description="longest a worker's deliverer waits between looks for due deliveries; "
        "0: this worker delivers no webhooks",
    )
    webhook_concurrency: int = setting(
        4, ge=1, le=256, description="webhook requests one worker has in flight at most"
    )
    webhook_timeout_seconds: float = setting(
        10.0, ge=0.5, le=300, description="seconds one webhook request may take in all"
    )
    webhook_retry_seconds: float = setting(
        5.0,
        ge=0.01,
        le=3600,
        description="wait before a delivery's first retry; doubled on each retry after",
    )
    webhook_retry_max_seconds: float = setting(
        3600.0, ge=0.01, le=86_400, description="longest wait between two attempts"
    )
    webhook_max_attempts: int = setting(
        12, ge=1, le=100, description="attempts per delivery before it is marked failed"
    )
    webhook_disable_after_seconds: float = setting(
        432_000.0,
        ge=1,
        le=31_622_400,
        description="an endpoint whose every delivery failed for this long is disabled (5 days)",
    )
    webhook_allowed_networks: list[str] = setting_list(
        description="CIDRs webhooks may be delivered to although private or loopback "
        "(comma-separated); public addresses are always allowed",
    )

    def __post_init__(self) -> None:
        """Every value converted and checked at once: one error names every bad
        variable (the secrets read from their files first)."""
        _read_secret_files(self)
        problems = []
        for info in setting_infos().values():
            given = getattr(self, info.name)
            try:
                value = convert(info.kind, given, info.spec)
                check = _CHECKS.get(info.name)
                value = check(value) if check is not None else value
            except ValueRejected as exc:
                problems.append(_problem(info, given, str(exc)))
                continue
            object.__setattr__(self, info.name, value)
        if problems:
            raise SettingsError("invalid configuration: " + "; ".join(problems))

    def secrets(self) -> list[str]:
        """Values no log line may show (the database password, when the URL has one; the
        webhook key)."""
        url = self.database_url.get_secret_value()
        password = parse_conninfo(url).password if url else None
        hidden = [password] if password else []
        webhook_key = self.webhook_key.get_secret_value()
        return [*hidden, webhook_key] if webhook_key else hidden

    def serves_health(self) -> bool:
        """A health endpoint is served: on a port given, or on a loopback port the OS
        picks when only the port file is given."""
        return self.health_port != 0 or bool(self.health_port_file)

    def store_config(self, conninfo: str) -> StoreConfig:
        """The store's view of these settings, for a resolved connection string."""
        return StoreConfig(
            conninfo=conninfo,
            schema=self.db_schema,
            statement_timeout=self.statement_timeout,
            lock_timeout=self.lock_timeout,
            idle_in_transaction_timeout=self.idle_in_transaction_timeout,
            connect_timeout=self.connect_timeout,
            reconnect_max=self.reconnect_max_seconds,
        )


def _read_secret_files(settings: Settings) -> None:
    """The container convention for secrets: ``<field>_file`` names a file holding the
    value of ``field`` (refused when both are given, or the file is unreadable or empty)."""
    for field, variable, also in (
        ("database_url", "STINT_DATABASE_URL", " (or --database-url)"),
        ("webhook_key", "STINT_WEBHOOK_KEY", ""),
    ):
        path = getattr(settings, f"{field}_file")
        if path is None or path == "":
            continue
        given = getattr(settings, field)
        if given.get_secret_value() if isinstance(given, Secret) else given:
            raise SettingsError(
                f"invalid configuration: set {variable} or {variable}_FILE{also}, not both"
            )
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise SettingsError(
                f"invalid configuration: {variable}_FILE={path}: cannot read it: {why}"
            ) from None
        if not text:
            raise SettingsError(f"invalid configuration: {variable}_FILE={path}: the file is empty")
        object.__setattr__(settings, field, text)


def _usable_webhook_key(value: Secret) -> Secret:
    text = value.get_secret_value().strip()
    if text:
        try:
            WebhookKey(text)
        except ConfigError as exc:
            raise ValueRejected(exc.message) from None
    return Secret(text)


def _networks(value: list[str]) -> list[str]:
    for item in value:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueRejected(f"{item[:60]!r} is not a CIDR such as 10.0.0.0/8") from None
    return value


def _parsable_url(value: Secret) -> Secret:
    text = value.get_secret_value()
    if not text.strip():
        return Secret("")
    try:
        return Secret(parse_conninfo(text).conninfo)
    except ConfigError as exc:
        raise ValueRejected(str(exc)) from None


def _plain_role(value: str) -> str:
    try:
        return validate_role_name(value) if value else value
    except ConfigError as exc:
        raise ValueRejected(exc.message) from None


def _plain_schema(value: str) -> str:
    try:
        return validate_schema_name(value)
    except ConfigError as exc:
        raise ValueRejected(exc.message) from None


# Rules beyond a setting's type and bounds, applied after them.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "webhook_key": _usable_webhook_key,
    "webhook_allowed_networks": _networks,
    "database_url": _parsable_url,
    "app_role": _plain_role,
    "db_schema": _plain_schema,
}


@dataclass(frozen=True)
class SettingInfo:
    """One setting as the help, the reference and the checks see it."""

    name: str
    kind: object  # its type: int, float, bool, str, Secret, Path | None or list[str]
    spec: FieldSpec
    default: Any

    @property
    def description(self) -> str:
        return self.spec.description


@cache
def setting_infos() -> Mapping[str, SettingInfo]:
    """Every setting, in declaration order."""
    hints = typing.get_type_hints(Settings)
    infos = {}
    for field in dataclasses.fields(Settings):
        default = field.default
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        infos[field.name] = SettingInfo(field.name, hints[field.name], spec_of(field), default)
    return infos


def env_name(field_name: str) -> str:
    """The environment variable that sets a Settings field."""
    if field_name == "db_schema":
        return "STINT_SCHEMA"
    return f"STINT_{field_name.upper()}"


def field_range(field_name: str) -> tuple[Any, Any]:
    """A bounded setting's (low, high), so a flag with the same meaning (``enqueue
    --timeout`` and STINT_TURN_TIMEOUT) accepts exactly the same values."""
    spec = setting_infos()[field_name].spec
    return spec.ge, spec.le


def _allowed(info: SettingInfo) -> str:
    low, high = info.spec.ge, info.spec.le
    if low is not None and high is not None:
        return f"allowed range {low:g}..{high:g}"
    return f"expected {info.description}" if info.description else ""


def _problem(info: SettingInfo, given: Any, message: str) -> str:
    """One bad variable: its name, the value given, what is allowed. The database
    URL is never shown (its own message, already redacted, says what is wrong)."""
    if info.name == "database_url":
        return message
    shown = given if isinstance(given, str | int | float) else type(given).__name__
    if info.name in _SECRET_FIELDS:
        shown = "<hidden>"
    return f"{env_name(info.name)}={shown!s}: {message} ({_allowed(info)})"


def _from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The settings the environment gives (names matched ignoring case, an exact
    match first, as pydantic-settings did)."""
    folded = {name.lower(): value for name, value in environ.items()}
    given = {}
    for name in setting_infos():
        variable = env_name(name)
        if variable in environ:
            given[name] = environ[variable]
        elif variable.lower() in folded:
            given[name] = folded[variable.lower()]
    return given


def load_settings(**overrides: Any) -> Settings:
    """Read the environment, apply explicit overrides (CLI flags), validate once."""
    given: dict[str, Any] = dict(_from_environment(os.environ))
    given.update({k: v for k, v in overrides.items() if v is not None})
    return Settings(**given)


# Settings that existed once, and what replaced them: a deployment still setting
# one is told, instead of silently getting the new default.
_REMOVED = {
    "STINT_SESSION_QUEUE_LIMIT": (
        "the per-session queue limit is kept in the database now: "
        "stint admission set --default --max-session-queue N"
    ),
    "STINT_POOL_MIN_SIZE": "a worker's pool is STINT_POOL_SIZE connections, opened at start",
    "STINT_POOL_MAX_SIZE": "a worker's pool is STINT_POOL_SIZE connections, opened at start",
}
# STINT_* variables read by tools other than Settings (the tests, the lab, the
# container scripts and compose files): not settings, so never warned about.
_NOT_SETTINGS = (
    "STINT_REQUIRE_",
    "STINT_TEST_",
    "STINT_WRITE_",
    "STINT_RACE_",
    "STINT_SOAK_",
    "STINT_SCALE_",
    "STINT_LOAD_",
    "STINT_OUTAGE_",
    "STINT_QUOTA_TURNS",
    "STINT_DOCKER_",
    "STINT_DEBIAN_",
    "STINT_IMAGE_TAG",
    "STINT_BASE_CACHE",
    "STINT_WORKER_IMAGE",
    "STINT_UID",
    "STINT_HOST_CA_BUNDLE",
    "STINT_CHROMIUM",
    "STINT_APP_PASSWORD",
    "STINT_PG_PASSWORD",
    "STINT_PG_PORT",
)


def _setting_names() -> set[str]:
    """Every variable name Settings reads (its env names and aliases)."""
    return {env_name(name) for name in setting_infos()}


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """One warning per ``STINT_*`` variable no setting reads, naming the closest
    setting or what replaced a removed one (Settings ignores them)."""
    env = os.environ if environ is None else environ
    known = _setting_names()
    warnings = []
    for variable in sorted(env):
        if not variable.startswith("STINT_") or variable in known:
            continue
        if variable.startswith(_NOT_SETTINGS):
            continue
        if variable in _REMOVED:
            warnings.append(f"{variable} was removed and is ignored: {_REMOVED[variable]}")
            continue
        close = difflib.get_close_matches(variable, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        warnings.append(f"{variable} is not a Stint setting and is ignored{hint}")
    return warnings
