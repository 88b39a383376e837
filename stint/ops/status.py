"""Render ``stint status`` as text or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

from stint.store.models import StatusSummary

__all__ = ["render_status"]


def render_status(summary: StatusSummary, *, as_json: bool) -> str:
    if as_json:
        return json.dumps(asdict(summary), indent=2, sort_keys=True)
    lines = [f"workers: {len(summary.workers)}"]
    for w in summary.workers:
        pins = ",".join(w.pins) or "-"
        lines.append(
            f"  {w.id}  {w.state:<8} slots {w.slots}  active {w.active}  "
            f"heartbeat {w.heartbeat_age:.1f}s ago  pins {pins}  v{w.version}"
        )
    counts = ", ".join(f"{k} {v}" for k, v in sorted(summary.sessions.items())) or "none"
    lines.append(f"sessions: {counts}")
    lines.append(f"queued turns: {summary.queued_turns}")
    if summary.ready_unaccepted:
        lines.append(f"ready sessions no live worker accepts (pins): {summary.ready_unaccepted}")
    age = summary.oldest_ready_age
    lines.append("oldest ready session: " + ("none" if age is None else f"{age:.1f}s"))
    return "\n".join(lines)
