"""A tiny sizing validation in the regular suite, so its machinery cannot rot."""

from __future__ import annotations

import json
from pathlib import Path

from stint.lab.backends import LoadBackends
from stint.lab.sizing_report import sizing_report, write_sizing_report
from stint.lab.sizing_run import ValidationPlan, validate


async def test_a_tiny_validation_reports_and_a_starved_slot_does_not_hold(tmp_path: Path) -> None:
    roomy = ValidationPlan("roomy", 1, 4, rate=4.0, turn_seconds=0.1, seconds=2.0)
    # One slot for 0.5 s turns arriving at 4/s: 2 busy slots on average. With seed 1 the
    # ten arrivals come within 1.94 s, and the tenth cannot start before nine turns ran
    # (4.5 s of slot time): it waits at least 2.5 s, past the 1 s bound.
    starved = ValidationPlan("starved", 1, 1, rate=4.0, turn_seconds=0.5, seconds=2.0)
    backends = LoadBackends(settings=None)
    try:
        runs = [await validate(plan, backends, tmp_path / "work") for plan in (roomy, starved)]
    finally:
        backends.close()
    for run in runs:
        assert run.failed_checks == [], run.as_json()
        assert run.turns == 10  # the seeded schedule's arrivals, every one succeeded
        assert run.queue_age_s["max"] is not None
        assert run.busy_slots["max"] is not None
        assert run.worker_peak_rss_mib and all(m > 0 for m in run.worker_peak_rss_mib)
        assert len(run.worker_cpu_cores) == 1
    assert runs[1].queue_age_s["max"] is not None and runs[1].queue_age_s["max"] >= 2.5
    assert not runs[1].held
    report = sizing_report(
        sizing={
            "recommended": {"workers": 1, "slots_per_worker": 4},
            "slots": {"needed": 2, "busy": 0.4, "rule": "queueing"},
            "rule": "smoke",
            "stability": {"stable": True},
            "costs": {"report_generated_at": None},
        },
        size_command="stint size --rate 4 --turn-seconds 0.1",
        runs=runs,
        command="smoke",
        generated_at="2026-12-02T00:00:00+00:00",
        load_average={"start": [1.0, 1.0, 1.0], "end": [1.0, 1.0, 1.0]},
        backend="local",
        environment={"cpus": 2},
    )
    path = write_sizing_report(tmp_path / "report", report)
    assert json.loads(path.read_text())["runs"][1]["held"] is False
    text = (tmp_path / "report" / "sizing.md").read_text()
    assert "starved: 1 \N{MULTIPLICATION SIGN} 1" in text
    assert "**did not hold**" in text
    assert not (tmp_path / "work" / "starved").exists()  # a passed run leaves nothing behind
