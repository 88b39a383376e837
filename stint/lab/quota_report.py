"""``docs/load/quotas.md`` and ``docs/load/quotas.json`` from a quota soak's figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stint.lab.report_head import report_head

__all__ = ["write_quotas"]

SCHEMA_VERSION = 1
_NOT_MEASURED = "not measured"


def _s(value: Any) -> str:
    return _NOT_MEASURED if value is None else f"{value:.3f} s"


def _waits(name: str, spread: dict[str, Any]) -> str:
    return (
        f"| {name} | {spread['count']:,} | {_s(spread['p50'])} | {_s(spread['p95'])} | "
        f"{_s(spread['max'])} |"
    )


def _machine(env: dict[str, Any], load: list[float] | None) -> str:
    text = (
        f"{env['cpus']} CPUs, {env['memory_gib']} GiB, {env['os']}, Python {env['python']}, "
        f"stint {env['stint']}"
    )
    if load is None:
        return f"{text}; load average not measured"
    return f"{text}; load average at the end {', '.join(f'{x:.1f}' for x in load)} (1, 5, 15 min)"


def _scale_note(plan: dict[str, Any]) -> list[str]:
    if plan["turns"] == 100_000:
        return []
    return [
        "",
        f"This run queued {plan['turns']:,} turns (`STINT_QUOTA_TURNS`), not the scenario's "
        f"100,000: the run is bound by the quotas ({plan['scopes']} scopes of {plan['rpm']} "
        f"requests per {plan['window_seconds']:g} s), so 100,000 turns take over an hour here.",
    ]


def _most(figures: dict[str, Any], what: str) -> str:
    busiest = figures.get("provider_busiest_window") or {}
    return f"{max(b[what] for b in busiest.values()):,}" if busiest else _NOT_MEASURED


def _window(figures: dict[str, Any], key: str) -> str:
    busiest = (figures.get("provider_busiest_window") or {}).get(key)
    return _NOT_MEASURED if busiest is None else f"{busiest['requests']:,}, {busiest['tokens']:,}"


def render_quotas(figures: dict[str, Any]) -> str:
    plan = figures["plan"]
    rss = figures["worker_rss_mib"]
    lines = [
        *report_head("Provider quotas: a quota soak", figures["generated_at"], figures["command"]),
        f"{plan['turns']:,} agents-harness turns (one model call each) from a backlog, over "
        f"{plan['workers']} workers {chr(215)} {plan['slots']} slots against a fake "
        f"OpenAI-compatible provider with no token delay. The workers are split over "
        f"{plan['scopes']} quota scopes, each allowing {plan['rpm']:,} requests and "
        f"{plan['tpm']:,} tokens per {plan['window_seconds']:g} s window, waiting in place "
        f"at most {plan['wait_in_place']:g} s (`STINT_QUOTA_WAIT_IN_PLACE`). PostgreSQL: "
        f"{figures['backend']}. Machine: "
        f"{_machine(figures['environment'], figures.get('load_average'))}.",
        *_scale_note(plan),
        "",
        f"- **{figures['items_per_second']} items/s** ({plan['turns']:,} turns in "
        f"{figures['seconds']} s, from the workers' start to the last turn finished; at most "
        f"{plan['scopes'] * plan['rpm'] / plan['window_seconds']:g}/s could pass the quotas, "
        "less as a request fills its window until a window after its answer).",
        f"- Books exact: **{figures['books_exact']}** (at rest every scope's reserved = "
        "reconciled + refunded - debt + unknown, nothing in flight, and its requests and "
        "reconciled tokens equal the provider's own count for its API key).",
        f"- At the provider's door (by arrival time): the busiest {plan['window_seconds']:g} s "
        f"window of any scope held **{_most(figures, 'requests')} requests** (limit "
        f"{plan['rpm']:,}) and {_most(figures, 'tokens')} tokens (limit {plan['tpm']:,}); "
        f"within the limits: **{figures.get('within_limits_at_the_provider')}**.",
        f"- Checks: {figures['checks_summary']}.",
        f"- Worker RSS (MiB) after {plan['warmup_share']:.0%} of the turns: "
        f"{rss['after_warmup']}; at the end: {rss['at_end']}; growth: {rss['growth']}.",
        "",
        "## Waits for quota",
        "",
        "| wait | count | p50 | p95 | max |",
        "| --- | ---: | ---: | ---: | ---: |",
        _waits("in the slot, per model call that waited", figures["waits_in_place_s"]),
        _waits("not-before distance of a hand-back", figures["deferral_not_before_s"]),
        "",
        "## Books per scope",
        "",
        "| scope | requests reserved | reconciled | unknown | tokens reserved | reconciled "
        "| refunded | debt | unknown | deferrals | provider saw (requests, tokens) "
        "| busiest window at the provider (requests, tokens) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for scope in figures["scopes"]:
        r, t = scope["requests"], scope["tokens"]
        seen = figures["provider_counts"].get(scope["key"], {})
        saw = sum(seen.get(k, 0) for k in ("ok", "dropped", "status"))
        lines.append(
            f"| {scope['scope']} | {r['reserved']:,} | {r['reconciled']:,} | {r['unknown']:,} "
            f"| {t['reserved']:,} | {t['reconciled']:,} | {t['refunded']:,} | {t['debt']:,} "
            f"| {t['unknown']:,} | {scope['deferrals']:,} | {saw:,}, {seen.get('tokens', 0):,} "
            f"| {_window(figures, scope['key'])} |"
        )
    lines += ["", f"Raw figures: `docs/load/quotas.json` (schema {SCHEMA_VERSION}).", ""]
    return "\n".join(lines)


def write_quotas(docs: Path, figures: dict[str, Any]) -> None:
    figures = {"schema_version": SCHEMA_VERSION, **figures}
    docs.mkdir(parents=True, exist_ok=True)
    (docs / "quotas.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
    (docs / "quotas.md").write_text(render_quotas(figures))
