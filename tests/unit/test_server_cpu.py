"""PostgreSQL's CPU split by process kind: the soak's account must add up to the
server's whole clock, whatever processes came and went within a window."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stint.lab.scale_report import render_scale
from stint.lab.server_cpu import EXITED, POSTMASTER, UNNAMED, ServerCpu

pytestmark = pytest.mark.timeout(30)


def test_a_window_splits_by_kind_and_adds_up_to_the_whole_clock() -> None:
    earlier = ServerCpu(
        own=1.0,
        reaped=10.0,
        processes={100: ("stint-worker-pool", 5.0), 200: ("autovacuum worker", 2.0)},
    )
    later = ServerCpu(
        own=1.5,
        # pid 200 exited with 3.5 s in all (1.5 s of it in the window); a process born
        # and reaped inside the window used 0.25 s.
        reaped=10.0 + 3.5 + 0.25,
        processes={100: ("stint-worker-pool", 7.0), 300: ("stint-load-probe", 0.75)},
    )
    used = later.since(earlier)
    assert used == {
        POSTMASTER: 0.5,
        "stint-worker-pool": 2.0,
        "stint-load-probe": 0.75,
        EXITED: 1.75,
    }
    assert sum(used.values()) == pytest.approx(later.total - earlier.total)


def test_a_reading_names_live_children_and_leaves_unlisted_ones_unnamed() -> None:
    children = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"]) for _ in range(2)
    ]
    try:
        named = children[0].pid
        reading = ServerCpu.read(os.getpid(), {named: "stint-worker-listen"})
        assert reading is not None
        assert reading.processes[named][0] == "stint-worker-listen"
        assert reading.processes[children[1].pid][0] == UNNAMED
    finally:
        for child in children:
            child.kill()
            child.wait()


def _figures(by_kind: list[dict[str, float]]) -> dict[str, object]:
    return {
        "plan": {
            "turns": 200,
            "rate": 10.0,
            "workers": 1,
            "slots": 2,
            "turns_per_session": 5,
            "parked": 10,
            "retain_seconds": 60.0,
            "prune_interval": 5.0,
        },
        "queue_age_s": {"p50": 0.1, "p95": 0.2, "max": 0.3},
        "generated_at": "2026-12-04T19:00:00+00:00",
        "command": "pytest loadtest --run-load -k scale",
        "backend": "local",
        "claim_ms_with_parked_before_load": 0.04,
        "checks_summary": "all passed",
        "windows": [
            {
                "finished": 100 * (i + 1),
                "enqueued_per_s": 10.0,
                "turns_per_s": 10.0,
                "statements_ms": {},
                "oldest_ready_age_max_s": 0.1,
                "worker_rss_mib": [50.0],
                "table_mib": {},
                "turns_per_pg_cpu_second": 100.0,
                "turns_per_pg_cpu_second_without_probe": 125.0,
                "pg_cpu_by_kind": kinds,
            }
            for i, kinds in enumerate(by_kind)
        ],
    }


def test_the_report_sums_the_split_over_windows_per_turn() -> None:
    text = render_scale(
        _figures(
            [
                {"stint-worker-pool": 0.6, "stint-load-probe": 0.2, "checkpointer": 0.2},
                {"stint-worker-pool": 0.4, "stint-load-probe": 0.2},
            ]
        )
    )
    assert "| stint-worker-pool | 1.00 | 62.5% | 5.000 |" in text
    assert "| stint-load-probe | 0.40 | 25.0% | 2.000 |" in text
    assert "| all | 1.60 | 100% | 8.000 |" in text
    assert "| 125.0 |" in text


def test_a_report_of_a_run_without_the_split_has_no_split_section() -> None:
    assert "Where PostgreSQL's CPU went" not in render_scale(_figures([{}]))
