"""The adapters' load page: CPU per turn net of loading, and the ratio to the agents harness."""

from __future__ import annotations

from typing import Any

from stint.lab.adapters_report import render

X = "\N{MULTIPLICATION SIGN}"


def _case(harness: str, rep: int, cpu: float, *, passed: bool = True) -> dict[str, Any]:
    phase = {"turns": 24, "turns_per_s": 6.5, "fraction_of_limit": 0.81}
    return {
        "case": {"harness": harness, "workers": 1, "slots": 4, "rep": rep},
        "phases": {"cold": phase, "warm": phase},
        "samples": {"worker_cpu_seconds": cpu, "peak_rss_mib_per_worker": [70.0 + rep]},
        "passed": passed,
    }


def test_the_page_reports_cpu_per_turn_net_of_loading_and_the_ratio() -> None:
    cases = [
        _case("agents", 1, 2.4 + 0.5),
        _case("agents", 2, 2.4 + 0.5),
        _case("openai-agents", 1, 3.6 + 1.5),
        _case("openai-agents", 2, 3.6 + 1.5, passed=False),
    ]
    page = render(cases, {"agents": 0.5, "openai-agents": 1.5}, command="pytest loadtest ...")
    rows = [line for line in page.splitlines() if line.startswith("| agents | 1 ")]
    assert rows == [f"| agents | 1 {X} 4 | 2/2 | 6.50 | 0.81 | 60.4ms | 50.0ms | 1.00 | 72MiB |"]
    adapter = [line for line in page.splitlines() if line.startswith("| openai-agents | 1 ")]
    assert adapter == [
        f"| openai-agents | 1 {X} 4 | 1/2 | 6.50 | 0.81 | 106.2ms | 75.0ms | 1.50 | 72MiB |"
    ]
    assert "| openai-agents | 1.50s |" in page
