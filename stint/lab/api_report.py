"""The API load case's report: ``api.json`` (the data) and ``api.md`` rendered from it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["render_api_markdown", "write_api_report"]

_NOT_MEASURED = "not measured"


def _ms(value: Any) -> str:
    return _NOT_MEASURED if value is None else f"{value * 1000:.1f} ms"


def _value(value: Any, unit: str = "") -> str:
    return _NOT_MEASURED if value is None else f"{value}{unit}"


def render_api_markdown(data: dict[str, Any]) -> str:
    case = data["case"]
    latency = data.get("delivery_latency") or {}
    api = data.get("api_process") or {}
    client = data.get("followers_client") or {}
    lines = [
        "# API load case: SSE followers while workers run",
        "",
        f"Made by `{data['command']}` on {data['generated_at']}.",
        f"Data: [api.json](api.json). Case `{case['label']}`: one `stint api` process, "
        f"{case['followers']} SSE followers on {case['sessions']} sessions "
        f"({case['followers'] // max(1, case['sessions'])} per session), "
        f"{case['workers']} workers x {case['slots']} slots, {case['bursts']} bursts of one turn "
        f"per session ({case['tool_wait_ms']} ms scripted tool wait). "
        f"All checks passed: **{data['passed']}**.",
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| event deliveries | {_value(latency.get('deliveries'))} |",
        f"| delivery latency p50 | {_ms(latency.get('p50_s'))} |",
        f"| delivery latency p95 | {_ms(latency.get('p95_s'))} |",
        f"| delivery latency p99 | {_ms(latency.get('p99_s'))} |",
        f"| delivery latency max | {_ms(latency.get('max_s'))} |",
        f"| API peak RSS | {_value(api.get('peak_rss_mib'), ' MiB')} |",
        f"| API RSS before / with followers connected | "
        f"{_value(api.get('rss_mib_before_followers'), ' MiB')} / "
        f"{_value(api.get('rss_mib_with_followers_connected'), ' MiB')} |",
        f"| API CPU | {_value(api.get('cpu_seconds'), ' s')} over "
        f"{_value(api.get('seconds_measured'), ' s')} "
        f"({_value(api.get('cpu_percent_of_one_core'), '% of one core')}) |",
        f"| API PostgreSQL connections (peak) | {_value(api.get('peak_postgres_connections'))} "
        f"{json.dumps(api.get('peak_postgres_connections_by_role', {}))} |",
        f"| followers connected in | {_value(client.get('connect_all_s'), ' s')} |",
        f"| follower client CPU (the test process) | {_value(client.get('cpu_seconds'), ' s')} |",
        "",
        "| burst | turns | succeeded | turns/s | fraction of limit | e2e p50 | e2e p95 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, b in enumerate(data.get("bursts", [])):
        lines.append(
            f"| {i + 1} | {b['turns']} | {b['succeeded']} | {b['turns_per_s']} | "
            f"{b['fraction_of_limit']} | {_value(b['e2e_p50_s'], ' s')} | "
            f"{_value(b['e2e_p95_s'], ' s')} |"
        )
    lines += ["", "Checks:", ""]
    for check in data.get("checks", []):
        verdict = "pass" if check["passed"] else "FAIL"
        lines.append(f"- {verdict} `{check['name']}`")
    lines += [
        "",
        "How to read the latency: for each event every follower received, the client's",
        "wall clock at receipt minus the event's `created_at`, which PostgreSQL sets with",
        "`clock_timestamp()` when the row is inserted, just before its transaction commits.",
        "Both clocks are this machine's one clock, so the figure is a real delay; it",
        "includes the insert-to-commit time and the follower client's own scheduling (all",
        "followers share one Python process on the same two cores as PostgreSQL, the",
        "workers and the API). Across machines, clock skew would add to it.",
        "",
        f"PostgreSQL: {data['backend']['kind']}, limits {json.dumps(data['backend'])}.",
        "",
    ]
    return "\n".join(lines)


def write_api_report(report_dir: Path, case: dict[str, Any], *, command: str) -> Path:
    """Write api.json and api.md; returns the markdown's path."""
    report_dir.mkdir(parents=True, exist_ok=True)
    data = {
        **case,
        "command": command,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (report_dir / "api.json").write_text(
        json.dumps(data, indent=2, allow_nan=False, default=str) + "\n"
    )
    markdown = report_dir / "api.md"
    markdown.write_text(render_api_markdown(data))
    return markdown
