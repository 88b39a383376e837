"""What one more slot and one more worker cost: the memory ladder's figures.

Each rung is a full load case (so every invariant check still applies); the
marginal cost is the least-squares slope of peak RSS (and USS) against slots
in one worker, and of the sum over workers against the number of workers.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stint.lab.fit import least_squares_slope
from stint.lab.model import CaseReport, CaseSpec
from stint.lab.report_head import report_head

__all__ = ["Rung", "marginal", "write_ladder"]


@dataclass(frozen=True)
class Rung:
    workers: int
    slots: int
    peak_rss_mib: float | None  # the largest worker
    peak_uss_mib: float | None
    peak_sum_rss_mib: float | None
    db_connections_per_worker: float | None
    warm_fraction_of_limit: float | None
    passed: bool

    @classmethod
    def of(cls, spec: CaseSpec, report: CaseReport) -> Rung:
        samples = report.samples
        return cls(
            workers=spec.workers,
            slots=spec.slots,
            peak_rss_mib=max(samples.peak_rss_mib_per_worker, default=None) if samples else None,
            peak_uss_mib=max(samples.peak_uss_mib_per_worker, default=None) if samples else None,
            peak_sum_rss_mib=samples.peak_sum_rss_mib if samples else None,
            db_connections_per_worker=samples.db_connections_per_worker if samples else None,
            warm_fraction_of_limit=report.warm.fraction_of_limit if report.warm else None,
            passed=report.passed,
        )


def marginal(rungs: list[Rung], along: str, figure: str = "peak_rss_mib") -> float | None:
    """MiB per extra slot (``along="slots"``) or per extra worker (``"workers"``)."""
    points = [
        (float(getattr(r, along)), float(getattr(r, figure)))
        for r in rungs
        if getattr(r, figure) is not None
    ]
    slope = least_squares_slope(points)
    return None if slope is None else round(slope, 3)


def _figures(rungs: list[Rung]) -> dict[str, Any]:
    one = [r for r in rungs if r.workers == 1]
    many = [r for r in rungs if r.slots == 4]
    return {
        "rss_mib_per_extra_slot": marginal(one, "slots"),
        "uss_mib_per_extra_slot": marginal(one, "slots", "peak_uss_mib"),
        "sum_rss_mib_per_extra_worker": marginal(many, "workers", "peak_sum_rss_mib"),
    }


def write_ladder(
    out_dir: Path, rungs: list[Rung], *, command: str, generated_at: str, backend: str
) -> Path:
    figures = _figures(rungs)
    data = {
        "generated_at": generated_at,
        "command": command,
        "backend": backend,
        "figures": figures,
        "rungs": [asdict(r) for r in rungs],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ladder.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        *report_head("Memory ladder: slots and workers", generated_at, command),
        f"Each rung is a full load case (2 x slots sessions, 250 ms tool wait, cold and warm "
        f"bursts, every check). {backend}.",
        "",
        f"- Peak RSS per extra slot in one worker: {figures['rss_mib_per_extra_slot']} MiB "
        f"(USS: {figures['uss_mib_per_extra_slot']} MiB); goal 0.5 MiB.",
        "- Peak sum RSS per extra worker of 4 slots: "
        f"{figures['sum_rss_mib_per_extra_worker']} MiB.",
        "",
        "| workers | slots | peak RSS (largest worker) | peak USS | peak sum RSS "
        "| DB connections per worker | warm fraction of limit | checks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rungs:
        lines.append(
            f"| {r.workers} | {r.slots} | {r.peak_rss_mib} MiB | {r.peak_uss_mib} MiB "
            f"| {r.peak_sum_rss_mib} MiB | {r.db_connections_per_worker} "
            f"| {r.warm_fraction_of_limit} | {'passed' if r.passed else 'FAILED'} |"
        )
    lines += ["", "Full figures: [ladder.json](ladder.json).", ""]
    path = out_dir / "ladder.md"
    path.write_text("\n".join(lines))
    return path
