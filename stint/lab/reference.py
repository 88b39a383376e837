"""docs/reference/ from the code: ``python -m stint.lab.reference`` (``make reference``).

Each page is drawn from what the programs really are: the Settings model, the
argparse parsers with their exit codes and the JSON they print, the metric
names, the event vocabulary and the committed OpenAPI spec. ``--check`` says
which pages are stale instead of writing them (``tests/unit/test_reference.py``
compares them in memory).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from stint.config.fields import Secret
from stint.config.options import ExitCodes
from stint.config.settings import env_name, setting_infos
from stint.lab import cli as lab_cli
from stint.ops import cli, exit_codes
from stint.ops.admission import admission_json
from stint.ops.checks import Check, CheckReport
from stint.ops.quota_cli import quota_json
from stint.ops.show import session_json, turn_json, turn_of_session_json
from stint.ops.sizing import Workload, size
from stint.ops.sizing_costs import CostModel, CostPoint, Range
from stint.ops.status import status_json
from stint.store.admission import LimitsRow
from stint.store.children import Descendant
from stint.store.controls import AnswerResult, ControlResult
from stint.store.models import ApiKey, EnqueueResult, Event, QuotaScope, StatusSummary, WorkerRow
from stint.store.usage import SessionUsage, TurnUsage
from stint.store.vocabulary import EVENTS, EventKind, TurnStatus, WorkerState
from stint.telemetry.names import METRICS
from stint.worker import main as worker_main
from stint.worker.pruner import PruneReport

__all__ = ["JsonOutput", "json_outputs", "main", "render"]

REFERENCE = Path("docs/reference")
_COMMAND = "`make reference` (`python -m stint.lab.reference`)"


def _head(title: str, source: str) -> list[str]:
    return [f"_Generated from {source} by {_COMMAND}: do not edit by hand._", "", f"# {title}", ""]


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _row(*cells: object) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    return [_row(*header), _row(*(["---"] * len(header))), *(_row(*r) for r in rows)]


# ------------------------------------------------------------------ settings


def _default(value: Any) -> str:
    if isinstance(value, Secret):
        value = value.get_secret_value()
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"{value:g}"
    if value in ("", []):
        return "empty"
    return f"`{value}`"


def _allowed(name: str) -> str:
    info = setting_infos()[name]
    low, high, pattern = info.spec.ge, info.spec.le, info.spec.pattern
    kinds: dict[object, str] = {int: "integer", float: "number", bool: "true or false"}
    kind = kinds.get(info.kind, "")
    if info.kind == list[str]:
        kind = "comma-separated"
    if low is not None and high is not None:
        return f"{kind} {low:g}..{high:g}".strip()
    return f"`{pattern}`" if pattern else kind


def _flags() -> dict[str, list[str]]:
    """Settings field -> the command-line flags that override it."""
    found: dict[str, list[str]] = {}
    for prog, parser in _programs():
        for path, sub in _walk(parser, prog):
            for action in sub._actions:
                mirrors = f"({env_name(action.dest)};" in (action.help or "")
                if action.dest in setting_infos() and action.option_strings and mirrors:
                    flag = f"`{path} {action.option_strings[0]}`"
                    found.setdefault(action.dest, []).append(flag)
    return found


def settings_page() -> str:
    flags = _flags()
    rows = []
    for name, info in setting_infos().items():
        rows.append(
            (
                f"`{env_name(name)}`",
                _default(info.default),
                _allowed(name),
                ", ".join(flags.get(name, [])),
                info.description or "",
            )
        )
    lines = _head("Settings", "`stint/config/settings.py`")
    lines += [
        "Every setting is a `STINT_*` environment variable; a flag, where there is one, wins. "
        "A value out of range stops the program at start with one line naming the variable "
        "and what it accepts.",
        "",
        *_table(("variable", "default", "allowed", "flag", "meaning"), rows),
    ]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------- CLI


@dataclass(frozen=True)
class JsonOutput:
    """A JSON shape a command prints: a sample built by the code that prints it,
    and what some of its fields mean (each must be a field of the sample)."""

    commands: tuple[str, ...]
    title: str
    sample: Mapping[str, Any]
    notes: Mapping[str, str] = field(default_factory=dict)


_NOW = datetime(2026, 1, 1, tzinfo=UTC)
_ID = UUID(int=1)
_NULL_WHEN_UNREPORTED = "null where no model call reported it"


def _turn() -> TurnUsage:
    return TurnUsage(
        _ID, 1, TurnStatus.SUCCEEDED, None, 1, "w", {}, None, _NOW, _NOW, _NOW, 0, *[None] * 4
    )


def _sizing_sample() -> dict[str, Any]:
    """``stint size --json`` on a made-up cost model (the shape, not figures)."""
    figures = {f.name: Range(1.0, 2.0) for f in fields(CostPoint)}
    model = CostModel(
        harness="scripted",
        figures={**figures, "rss_mib_base": Range(50.0, 52.0), "rss_mib_per_slot": Range(0, 0.1)},
        claim_p95_ms=Range(10.0, 40.0),
        max_slots_measured=64,
        harness_max_slots=64,
        slots_measured=[1, 4, 64],
        per_slot_from="fit",
        configurations_used=3,
        configurations_failed=[],
        cpu_bound=[],
        machine_cpus=2,
        generated_at=None,
        command=None,
    )
    answer = size(model, Workload(rate=5.0, turn_seconds=20.0)).as_json()
    return {"report": "docs/load/matrix.json", **answer}


def json_outputs() -> list[JsonOutput]:
    """Every JSON shape a ``stint`` command prints, from the functions that print them."""
    sizing = _sizing_sample()
    session = SessionUsage(_ID, "idle", 3, [_turn()])
    limits = LimitsRow("*", None, None, 16, None, None, None, None, 0, 0, 0)
    admission = admission_json([limits], 0)
    status = status_json(
        StatusSummary(
            [WorkerRow("w", WorkerState.RUNNING, 1, 1, "h", "v", [], 0.1, True, 0)],
            {},
            0,
            0,
            0,
            None,
            1,
            0,
            0,
        ),
        admission,
    )
    report = CheckReport([Check("c", True, {})]).as_json()
    key = cli.key_json(
        ApiKey(id="k", tenant="t", read_only=False, label=None, created_at=_NOW, revoked_at=None)
    )
    scope = quota_json(QuotaScope("s", None, None, None, 60.0, *([0] * 13)))
    unlimited = "null: unlimited"
    follows = "null: a tenant's follows the default; the default's is unlimited"
    return [
        JsonOutput(
            ("enqueue",),
            "stint enqueue",
            EnqueueResult(_ID, _ID, 1, True).as_json(),
            {"seq": "the turn's number in its session", "created": "false: an idempotent retry"},
        ),
        JsonOutput(
            ("cancel", "interrupt"),
            "stint cancel, stint interrupt",
            ControlResult(_ID).as_json(),
            {
                "cancelled_queued": "turn ids ended while queued",
                "active_turn": "the running or parked turn acted on, or null",
                "outcome": "what happened, in words",
            },
        ),
        JsonOutput(
            ("answer",),
            "stint answer",
            AnswerResult(_ID, _ID, "k", True).as_json(),
            {
                "resumed": "always true",
                "created": "false: the same answer was already recorded",
            },
        ),
        JsonOutput(
            ("tail",),
            "stint tail (one line per event)",
            Event(_ID, 1, EventKind.TURN_STARTED, None, {}, _NOW).as_json(),
            {"kind": "see [events.md](events.md)", "payload": "the kind's fields"},
        ),
        JsonOutput(
            ("show",),
            "stint show",
            session_json(
                session,
                [Descendant(_ID, UUID(int=2), "succeeded", "cascade", 1)],
            ),
            {
                "usage": "summed over the turns",
                "turns": "in order",
                "parent_id": "the session whose turn spawned this one (ctx.spawn), or null",
                "children": "the tree of child sessions below it, level by level",
            },
        ),
        JsonOutput(("show",), "stint show --turn", turn_of_session_json(session, _turn())),
        JsonOutput(("show",), "stint show: turns[], turn", turn_json(_turn())),
        JsonOutput(
            ("show",),
            "stint show: usage, session_usage, turns[].usage",
            _turn().usage(),
            {
                "input_tokens": _NULL_WHEN_UNREPORTED,
                "output_tokens": _NULL_WHEN_UNREPORTED,
                "cached_tokens": _NULL_WHEN_UNREPORTED,
                "retries": _NULL_WHEN_UNREPORTED,
            },
        ),
        JsonOutput(
            ("prune",),
            "stint prune",
            PruneReport().as_json(),
            {
                "database": "false: another worker took this interval's run (never for the CLI)",
                "reservations": "quota ledger rows of pruned turns",
                "sessions": "idle sessions with no turn left (STINT_RETAIN_IDLE_SESSIONS_DAYS)",
                "dashboard_sessions": "dashboard sign-ins that expired or were signed out",
                "journals": "effect journals removed",
            },
        ),
        JsonOutput(
            ("status",),
            "stint status --json",
            status,
            {
                "admission": "as `stint admission show` prints it",
                "sessions": "count by status",
                "oldest_ready_age": "seconds, or null",
                "ready_without_worker": "ready sessions waiting because no worker is alive",
                "ready_unaccepted": "ready sessions no live worker's pins accept",
                "quotas": "every provider quota scope, as `stint quota show` prints it",
                "mcp_servers": "the MCP servers `STINT_MCP_SERVERS` names: name, transport "
                "(stdio or http), where (command or URL; never a header or an env value)",
            },
        ),
        JsonOutput(
            ("status",),
            "stint status --json: workers[]",
            status["workers"][0],
            {
                "state": "running, draining, stopped, or dead (its heartbeat outlived its lease)",
                "active": "sessions it leases",
            },
        ),
        JsonOutput(
            ("check",),
            "stint check --json",
            report,
            {"checks": "one per invariant"},
        ),
        JsonOutput(("check",), "stint check --json: checks[]", report["checks"][0]),
        JsonOutput(
            ("size",),
            "stint size --json",
            sizing,
            {
                "report": "the matrix.json sized from",
                "workload": "the rate, turn seconds, headroom and wait target as given",
                "budget": "per-worker CPU and memory, the slots-per-worker cap in force, spare "
                "workers, lease and drain seconds",
                "slots": "busy slots (Little's law), by headroom, by queueing (Erlang C), "
                "needed, and the rule that decided",
                "recommended": "the chosen option (as in options); null when nothing fits",
                "rule": "the rule that chose it, in words",
                "options": "the recommended option first, then the same slots in smaller workers",
                "stability": "stable or not, the figures checked at the bottom of their range, "
                "and each deciding figure with the answer it would give",
                "costs": "the cost ranges used ([min, max]), your own figures, and what the "
                "report says of itself (CPU-bound cells, its machine, when and how it was made)",
                "notes": "the assumptions, in words",
            },
        ),
        JsonOutput(
            ("size",),
            "stint size --json: options[]",
            sizing["options"][0],
            {
                "shape": "workers x slots per worker",
                "slots_after_one_lost": "what the survivors hold when one worker is gone",
                "worker_cpu_ms_per_s": "one worker's CPU with one worker lost, top of the ranges",
                "postgres_cpu_cores": "the turns' and the idle workers' polling; null when the "
                "report could not measure PostgreSQL",
                "wait_probability": "Erlang C: the share of turns that would wait for a slot",
                "crash_sessions": "sessions a crashed worker held on average; they resume after "
                "their lease",
                "drain_turns": "turns a draining worker finishes, or hands back past the drain "
                "budget",
                "why_not": "why an option does not fit its budgets or the cap",
            },
        ),
        JsonOutput(
            ("keys",),
            "stint keys create (with token), stint keys list (one line per key)",
            {**key, "token": "stk_..."},
            {"token": "create only: the key itself, shown this once; only its digest is stored"},
        ),
        JsonOutput(
            ("quota",),
            "stint quota show, list (one line per scope), set (with `created`); delete prints "
            "`scope` and `deleted`",
            scope,
            {
                "rpm": unlimited,
                "tpm": unlimited,
                "concurrency": unlimited,
                "requests": "reserved, reconciled, unknown, in_flight",
                "tokens": "reserved, reconciled, refunded, debt, unknown, in_flight",
                "deferrals": "turns handed back for this scope",
                "window": "requests and tokens counted in the window now",
            },
        ),
        JsonOutput(
            ("admission",),
            "stint admission show (and status --json: admission)",
            admission,
            {"tenants": "the `*` defaults row first, then each tenant with limits of its own"},
        ),
        JsonOutput(
            ("admission",),
            "stint admission show: global_backlog",
            admission["global_backlog"],
            {"limit": "null: none", "unfinished_turns": "of every tenant, now"},
        ),
        JsonOutput(
            ("admission",),
            "stint admission show: tenants[]",
            limits.as_json(),
            {"tenant": "`*`: the defaults"},
        ),
        JsonOutput(
            ("admission",),
            "stint admission show: tenants[].limits",
            limits.as_json()["limits"],
            dict.fromkeys(limits.as_json()["limits"], follows),
        ),
        JsonOutput(
            ("admission",),
            "stint admission show: tenants[].usage",
            limits.as_json()["usage"],
            {
                "queued": "unfinished turns (the `*` row: of sessions without a tenant)",
                "running": "active sessions (the `*` row: of sessions without a tenant)",
                "sessions": "sessions held, any status (the `*` row: without a tenant)",
            },
        ),
    ]


def _programs() -> list[tuple[str, argparse.ArgumentParser]]:
    return [
        ("stint", cli.build_parser()),
        ("worker", worker_main.build_parser()),
        ("stint-lab", lab_cli.build_parser()),
    ]


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, Any]]:
    """(name, help, parser) of each subcommand, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, Any]]:
    yield path, parser
    for name, _, sub in _subparsers(parser):
        yield from _walk(sub, f"{path} {name}")


def _option(action: argparse.Action) -> tuple[str, str]:
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            choices = "{" + ",".join(map(str, action.choices)) + "}" if action.choices else None
            name += f" {action.metavar or choices or action.dest.upper()}"
    else:
        choices = "{" + ",".join(map(str, action.choices)) + "}" if action.choices else None
        name = str(action.metavar or choices or action.dest)
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "default": action.default}
    if getattr(action, "required", False) and action.option_strings:
        text += " (required)"
    return f"`{name}`", text


def _options(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    return [
        _option(a)
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
    ]


def _codes(codes: ExitCodes) -> list[str]:
    return _table(("exit code", "meaning"), [(f"`{c}`", m) for c, m in codes])


def _json_section(output: JsonOutput) -> list[str]:
    unknown = set(output.notes) - set(output.sample)
    if unknown:
        raise ValueError(f"{output.title}: notes on fields it does not print: {sorted(unknown)}")
    rows = [(f"`{name}`", output.notes.get(name, "")) for name in output.sample]
    return [f"JSON output, {output.title}:", "", *_table(("field", "meaning"), rows), ""]


def _command(
    path: str, summary: str, parser: argparse.ArgumentParser, level: int, outputs: list[JsonOutput]
) -> list[str]:
    positionals = " ".join(
        _option(a)[0].strip("`")
        for a in parser._actions
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
    )
    subs = list(_subparsers(parser))
    synopsis = " ".join(filter(None, [path, "ACTION" if subs else "", positionals, "[options]"]))
    lines = [f"{'#' * level} `{path}`", ""]
    if summary:
        lines += [summary[0].upper() + summary[1:] + ".", ""]
    if parser.description and parser.description != summary:
        lines += [parser.description, ""]
    lines += [f"`{synopsis}`", ""]
    options = _options(parser)
    if options:
        lines += [*_table(("option", "meaning"), options), ""]
    name = path.split()[1] if " " in path else ""
    codes = exit_codes.COMMANDS.get(name) if level == 3 else None
    if codes:
        lines += [*_codes(codes), ""]
    for output in outputs if level == 3 else []:
        if name in output.commands:
            lines += _json_section(output)
    for sub_name, sub_help, sub in subs:
        lines += _command(f"{path} {sub_name}", sub_help, sub, level + 1, outputs)
    return lines


def cli_page() -> str:
    stint, worker, lab = (parser for _, parser in _programs())
    outputs = json_outputs()
    lines = _head("Command line: `stint`, `worker` and `stint-lab`", "the argparse parsers")
    lines += [
        "Every refusal is one line on stderr and writes nothing. Every `stint` command may also "
        "exit with these codes:",
        "",
        *_codes(exit_codes.COMMON),
        "",
        "## `stint`",
        "",
        str(stint.description),
        "",
        *_table(("option", "meaning"), _options(stint)),
        "",
    ]
    for name, summary, sub in _subparsers(stint):
        lines += _command(f"stint {name}", summary, sub, 3, outputs)
    lines += ["## `worker`", "", str(worker.description), ""]
    lines += [*_table(("option", "meaning"), _options(worker)), ""]
    lines += [*_codes(worker_main.EXIT_CODES), ""]
    lines += ["## `stint-lab`", "", str(lab.description), ""]
    lines += [*_codes(lab_cli.EXIT_CODES), ""]
    for name, summary, sub in _subparsers(lab):
        lines += ["### `stint-lab " + name + "`", "", summary, ""]
        lines += [*_table(("option", "meaning"), _options(sub)), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# ------------------------------------------------------------------- metrics


def metrics_page() -> str:
    rows = [
        (
            f"`{m.name}`",
            m.type,
            ", ".join(f"`{label}`" for label in m.labels),
            m.source,
            m.description,
        )
        for m in METRICS
    ]
    lines = _head("Metrics", "`stint/telemetry/names.py`")
    lines += [
        "A worker with a health port (`STINT_HEALTH_PORT`) serves these at `/metrics` "
        "(`STINT_METRICS=false` turns them off); `stint api` serves its own. Labels never "
        "carry an id, an input, a tenant or a secret. The elected sampler's figures are "
        "exported by one worker only, so `sum()` or `max()` over the fleet counts them once.",
        "",
        *_table(("metric", "type", "labels", "exported by", "meaning"), rows),
    ]
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------- events


def events_page() -> str:
    lines = _head("Events", "`stint/store/vocabulary.py`")
    lines += [
        "Every session's events have contiguous cursors (`seq` 1..N, or from the retention "
        "cut + 1). Each event is `session_id`, `seq`, `kind`, `turn_id`, `payload`, "
        "`created_at`. Every ended turn has exactly one **terminal** event.",
        "",
        *_table(
            ("kind", "terminal", "written by", "what"),
            [
                (f"`{k}`", "yes" if k.terminal else "", EVENTS[k].writer, EVENTS[k].what)
                for k in EventKind
            ],
        ),
        "",
    ]
    for kind in EventKind:
        doc = EVENTS[kind]
        rows = [(f"`{name}`", meaning) for name, meaning in doc.payload.items()]
        lines += [f"## `{kind}`", "", *_table(("payload field", "meaning"), rows), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# ------------------------------------------------------------------ HTTP API


def _type(schema: Mapping[str, Any]) -> str:
    if "$ref" in schema:
        return f"`{schema['$ref'].rsplit('/', 1)[1]}`"
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    kind = str(schema.get("type", "any"))
    if "format" in schema:
        kind += f" ({schema['format']})"
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None or high is not None:
        kind += f" {'' if low is None else f'{low:g}'}..{'' if high is None else f'{high:g}'}"
    return kind


def _ref_name(content: Mapping[str, Any]) -> str:
    for media, body in content.items():
        schema = body.get("schema", {})
        return f"{media}: {_type(schema)}"
    return ""


def http_api_page(spec: Mapping[str, Any]) -> str:
    lines = _head("HTTP API", "`docs/openapi.json`")
    lines += [str(spec["info"]["description"]), ""]
    routes = [
        (method.upper(), path, op)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    ]
    lines += _table(
        ("method", "route", "what", "status codes"),
        [(m, f"`{p}`", op.get("summary", ""), ", ".join(op["responses"])) for m, p, op in routes],
    )
    lines.append("")
    for method, path, op in routes:
        lines += [f"## `{method} {path}`", "", str(op.get("summary", "")) + ".", ""]
        params = op.get("parameters", [])
        if params:
            rows = [
                (
                    f"`{p['name']}`",
                    p["in"],
                    "yes" if p.get("required") else "",
                    _type(p.get("schema", {})),
                    p.get("description", ""),
                )
                for p in params
            ]
            lines += [*_table(("parameter", "in", "required", "type", "meaning"), rows), ""]
        if "requestBody" in op:
            lines += [f"Body: {_ref_name(op['requestBody']['content'])}.", ""]
        answers = [
            (f"`{code}`", r.get("description", ""), _ref_name(r.get("content", {})))
            for code, r in op["responses"].items()
        ]
        lines += [*_table(("status", "when", "body"), answers), ""]
    lines += ["## Schemas", ""]
    for name, schema in spec["components"]["schemas"].items():
        lines += [f"### `{name}`", ""]
        if schema.get("description"):
            lines += [str(schema["description"]), ""]
        props = schema.get("properties")
        if props:
            required = set(schema.get("required", []))
            members = [
                (f"`{p}`", _type(s), "yes" if p in required else "", s.get("description", ""))
                for p, s in props.items()
            ]
            lines += [*_table(("field", "type", "required", "meaning"), members), ""]
        else:
            lines += [f"Type: {_type(schema)}.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# ---------------------------------------------------------------------- all


def render(root: Path) -> dict[Path, str]:
    """Every reference page, by its path under ``root``."""
    spec = json.loads((root / "docs" / "openapi.json").read_text())
    pages: dict[str, Callable[[], str]] = {
        "settings.md": settings_page,
        "cli.md": cli_page,
        "metrics.md": metrics_page,
        "events.md": events_page,
        "http-api.md": lambda: http_api_page(spec),
    }
    return {REFERENCE / name: page() for name, page in pages.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stint.lab.reference", description="Write docs/reference/ from the code."
    )
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout (here)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, text in render(args.root).items():
        target = args.root / path
        if target.exists() and target.read_text() == text:
            continue
        stale.append(str(path))
        if not args.check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    verb = "stale" if args.check else "written"
    print(f"{verb}: {', '.join(stale)}" if stale else "docs/reference is up to date")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
