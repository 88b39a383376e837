"""Render ``stint status`` as text or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from stint.agents.mcp.config import load_servers
from stint.config.settings import Settings
from stint.ops.quota_cli import quota_json
from stint.store.models import StatusSummary

__all__ = ["mcp_listing", "render_status", "status_json"]


def status_json(
    summary: StatusSummary, admission: dict[str, Any], mcp: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """The JSON form: every field of the summary; a worker whose heartbeat outlived
    its lease has ``state`` ``dead`` (its row may still say running); each quota
    scope as ``stint quota show`` prints it; the admission limits and usage as
    ``stint admission show`` prints them; the MCP servers ``STINT_MCP_SERVERS``
    names (name, transport, where: never a header or an env value)."""
    data = asdict(summary)
    data["mcp_servers"] = mcp or []
    data["quotas"] = [quota_json(q) for q in summary.quotas]
    for row, worker in zip(data["workers"], summary.workers, strict=True):
        row["state"] = worker.shown_state
    data["admission"] = admission
    return data


def mcp_listing(settings: Settings) -> list[dict[str, str]]:
    """The MCP servers ``STINT_MCP_SERVERS`` names, as ``stint status`` lists them
    (read from the file: the CLI starts none of them). An unusable file is an error."""
    if settings.mcp_servers is None:
        return []
    return [
        {"name": c.name, "transport": c.transport, "where": c.where()}
        for c in load_servers(settings.mcp_servers)
    ]


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def _admission_lines(admission: dict[str, Any]) -> list[str]:
    backlog = admission["global_backlog"]
    lines = [
        f"admission: {backlog['unfinished_turns']} unfinished turns, "
        f"global backlog limit {_limit(backlog['limit'])}"
    ]
    for row in admission["tenants"]:
        limits, usage = row["limits"], row["usage"]
        who = "default (and no tenant)" if row["tenant"] == "*" else f"tenant {row['tenant']}"
        lines.append(
            f"  {who}: queued {usage['queued']}/{_limit(limits['max_queued'])}  "
            f"active sessions {usage['running']}/{_limit(limits['max_running'])}  "
            f"per session {_limit(limits['max_session_queue'])}  "
            f"sessions {usage['sessions']}/{_limit(limits['max_sessions'])}"
        )
    return lines


def render_status(
    summary: StatusSummary,
    admission: dict[str, Any],
    *,
    as_json: bool,
    mcp: list[dict[str, str]] | None = None,
) -> str:
    if as_json:
        return json.dumps(status_json(summary, admission, mcp), indent=2, sort_keys=True)
    alive = sum(1 for w in summary.workers if w.alive and w.state != "stopped")
    lines = [f"workers: {len(summary.workers)} ({alive} alive)"]
    for w in summary.workers:
        pins = ",".join(w.pins) or "-"
        lines.append(
            f"  {w.id}  {w.shown_state:<8} slots {w.slots}  active {w.active}  "
            f"heartbeat {w.heartbeat_age:.1f}s ago  pins {pins}  v{w.version}"
        )
    counts = ", ".join(f"{k} {v}" for k, v in sorted(summary.sessions.items())) or "none"
    lines.append(f"sessions: {counts}")
    lines.append(
        f"turns: {summary.queued_turns} queued, {summary.running_turns} running, "
        f"{summary.parked_turns} parked (waiting for an answer)"
    )
    if summary.ready_without_worker:
        lines.append(
            f"ready sessions waiting because no worker is alive: {summary.ready_without_worker}"
        )
    if summary.ready_unaccepted:
        lines.append(f"ready sessions no live worker accepts (pins): {summary.ready_unaccepted}")
    age = summary.oldest_ready_age
    lines.append("oldest ready session: " + ("none" if age is None else f"{age:.1f}s"))
    for q in summary.quotas:
        lines.append(
            f"quota {q.scope}: window {q.window_requests} requests, {q.window_tokens} tokens; "
            f"{q.requests_in_flight} in flight, {q.requests_unknown} unknown, "
            f"{q.deferrals} deferrals"
        )
    lines.extend(_admission_lines(admission))
    if mcp:
        lines.append(f"mcp servers: {len(mcp)} (one client per server in each worker)")
        lines.extend(f"  {m['name']}  {m['transport']:<5}  {m['where']}" for m in mcp)
    return "\n".join(lines)
