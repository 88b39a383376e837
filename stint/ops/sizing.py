"""Turn a load-test matrix into a starting deployment size: workers x slots.

Operators size from *measured* figures, so everything here comes from the
matrix summary rows and says so when a figure was not measured (None, never a
made-up zero). The rule is first-order queueing arithmetic: busy slots ≈
arrival rate x active-turn seconds, plus headroom, divided by how close the
measured configuration came to its physical limit. It is a starting point for
an experiment, not a capacity promise. Pure computation: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Sizing", "measured_profile", "render_sizing", "size"]

_MAX_HEADROOM = 10.0
_X = "\N{MULTIPLICATION SIGN}"
# rate x seconds x (1 + headroom) is float arithmetic: 1 x 10 x 1.3 is 13.000000000000002,
# and ceil() of that must still be 13, so products are rounded this far before ceil().
_DECIMALS = 9


def _values(rows: list[dict[str, Any]], pick: Callable[[dict[str, Any]], Any]) -> list[float]:
    """The non-null numbers ``pick(row)`` yields across rows (pick may return None)."""
    found = (pick(row) for row in rows)
    return [float(v) for v in found if v is not None]


def _warm(row: dict[str, Any], key: str, end: int) -> Any:
    """One end (0 = min, 1 = max) of a warm-phase range, or None when not measured."""
    span = (row.get("warm") or {}).get(key)
    return span[end] if span else None


def _efficiency(row: dict[str, Any]) -> float | None:
    """Lowest observed warm turns/s over the group's physical limit; None unless positive."""
    low = _warm(row, "turns_per_s", 0)
    limit = row.get("physical_limit_turns_per_s")
    if low is None or not limit or low <= 0:
        return None
    return min(1.0, float(low) / float(limit))


def measured_profile(summary: list[dict[str, Any]]) -> dict[str, Any]:
    """Per slots-per-worker figures a sizing can use, from ``matrix.json`` summary rows.

    ``efficiency`` is conservative on purpose: the *lowest* warm turns/s over physical
    limit seen at that slots-per-worker (any group, any repetition), capped at 1, so
    a lucky repetition does not shrink the deployment. ``best_warm_fraction_of_limit``
    is reported alongside so the spread is visible.
    """
    by_slots: dict[int, list[dict[str, Any]]] = {}
    for index, row in enumerate(summary):
        slots = row.get("slots") if isinstance(row, dict) else None
        if not isinstance(slots, int) or slots < 1:
            raise ValueError(f"summary row {index} has no slots-per-worker count")
        by_slots.setdefault(slots, []).append(row)
    configurations = []
    for slots, rows in sorted(by_slots.items()):
        rss = _values(rows, lambda r: r.get("peak_rss_mib_per_worker_max"))
        connections = _values(rows, lambda r: r.get("db_connections_per_worker_max"))
        fractions = _values(rows, lambda r: _warm(r, "fraction_of_limit", 1))
        efficiencies = _values(rows, _efficiency)
        configurations.append(
            {
                "slots_per_worker": slots,
                "groups": len(rows),
                "workers_measured": sorted({int(r["workers"]) for r in rows}),
                "peak_rss_mib_per_worker": max(rss) if rss else None,
                "db_connections_per_worker": max(connections) if connections else None,
                "best_warm_fraction_of_limit": max(fractions) if fractions else None,
                "efficiency": min(efficiencies) if efficiencies else None,
                "all_checks_passed": all(bool(r.get("all_checks_passed")) for r in rows),
            }
        )
    return {"configurations": configurations}


@dataclass(frozen=True)
class Sizing:
    """A starting size for one workload, with the assumptions that produced it."""

    rate: float
    turn_seconds: float
    headroom: float
    slots_per_worker: int
    efficiency: float
    required_slots: int
    workers: int
    total_slots: int
    peak_rss_mib_per_worker: float | None
    memory_mib: int | None
    db_connections_per_worker: float | None
    db_connections: int | None
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _check_inputs(rate: float, turn_seconds: float, headroom: float, spw: int | None) -> None:
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be a positive number of turns per second, not {rate}")
    if not (math.isfinite(turn_seconds) and turn_seconds > 0):
        raise ValueError(f"turn seconds must be a positive number, not {turn_seconds}")
    if not (0 <= headroom <= _MAX_HEADROOM):
        raise ValueError(f"headroom must be between 0 and {_MAX_HEADROOM:g}, not {headroom}")
    if spw is not None and spw < 1:
        raise ValueError(f"slots per worker must be at least 1, not {spw}")


def _configurations(profile: dict[str, Any]) -> list[dict[str, Any]]:
    found = profile.get("configurations")
    if not isinstance(found, list) or not all(isinstance(c, dict) for c in found):
        raise ValueError("the sizing profile has no list of measured configurations")
    return found


_EFFICIENCY_SLACK = 0.1


def _preferred(configurations: list[dict[str, Any]]) -> dict[str, Any]:
    """The most slots per worker among the configurations that passed their checks and
    whose efficiency is within 0.1 of the best: fewer processes cost less memory and
    fewer connections, and the sizing already divides by the measured efficiency."""
    if not configurations:
        raise ValueError("the report measured no configuration; pass slots per worker explicitly")
    passed = [c for c in configurations if c.get("all_checks_passed")] or configurations
    measured = [c for c in passed if c.get("efficiency") is not None]
    if measured:
        best = max(float(c["efficiency"]) for c in measured)
        passed = [c for c in measured if float(c["efficiency"]) >= best - _EFFICIENCY_SLACK]
    return max(passed, key=lambda c: int(c["slots_per_worker"]))


def _ceil(value: float) -> int:
    return math.ceil(round(value, _DECIMALS))


def size(
    profile: dict[str, Any],
    *,
    rate: float,
    turn_seconds: float,
    headroom: float = 0.3,
    slots_per_worker: int | None = None,
) -> Sizing:
    """Workers x slots for ``rate`` turns/s each busy for ``turn_seconds``, from measurements."""
    _check_inputs(rate, turn_seconds, headroom, slots_per_worker)
    configurations = _configurations(profile)
    notes: list[str] = []
    if slots_per_worker is None:
        measured = _preferred(configurations)
        spw = int(measured["slots_per_worker"])
        notes.append(
            f"{spw} slots per worker: the most slots per worker measured whose efficiency is "
            f"within {_EFFICIENCY_SLACK} of the best (--slots-per-worker overrides)"
        )
    else:
        spw = slots_per_worker
        measured = next((c for c in configurations if c.get("slots_per_worker") == spw), {})
        if not measured:
            notes.append(f"{spw} slots per worker was not measured by this report")
    if not measured.get("all_checks_passed", True):
        notes.append(
            f"some cases at {spw} slots per worker failed checks: treat figures as suspect"
        )

    efficiency = measured.get("efficiency")
    if efficiency is None:
        efficiency = 1.0
        notes.append("efficiency not measured: assumed 1 (every slot busy back to back)")
    efficiency = min(1.0, float(efficiency))
    required = _ceil(rate * turn_seconds * (1 + headroom) / efficiency)
    workers = math.ceil(required / spw)

    rss = measured.get("peak_rss_mib_per_worker")
    connections = measured.get("db_connections_per_worker")
    if rss is None:
        notes.append("worker memory not measured: no memory figure")
    else:
        notes.append(
            "memory is the load fixture's sampled peak RSS per worker (shared mappings "
            "included); measure with real histories and set limits above it"
        )
    if connections is None:
        notes.append("database connections per worker not measured: no connection figure")
    else:
        notes.append(
            "database connections exclude API, CLI, monitoring and admin connections; "
            "leave PostgreSQL max_connections headroom above the total"
        )
    notes.append(
        "turn seconds is the average *active* turn time: parked sessions (approvals, "
        "questions) do not hold slots, long tools do"
    )
    return Sizing(
        rate=rate,
        turn_seconds=turn_seconds,
        headroom=headroom,
        slots_per_worker=spw,
        efficiency=efficiency,
        required_slots=required,
        workers=workers,
        total_slots=workers * spw,
        peak_rss_mib_per_worker=rss,
        memory_mib=None if rss is None else _ceil(workers * float(rss)),
        db_connections_per_worker=connections,
        db_connections=None if connections is None else _ceil(workers * float(connections)),
        notes=notes,
    )


def render_sizing(s: Sizing) -> str:
    """A few readable lines: the answer first, then how it was reached."""
    memory = (
        "not measured"
        if s.memory_mib is None
        else f"about {s.memory_mib} MiB worker RSS in total "
        f"({s.workers} {_X} {s.peak_rss_mib_per_worker:.0f} MiB peak per worker)"
    )
    connections = (
        "not measured"
        if s.db_connections is None
        else f"about {s.db_connections} in total "
        f"({s.workers} {_X} {s.db_connections_per_worker:g} per worker)"
    )
    lines = [
        f"Workers: {s.workers} {_X} {s.slots_per_worker} slots each ({s.total_slots} slots)",
        f"Required active slots: {s.required_slots} = ceil({s.rate:g} turns/s {_X} "
        f"{s.turn_seconds:g} s {_X} (1 + {s.headroom:g}) / efficiency {s.efficiency:.3f})",
        f"Memory: {memory}",
        f"Database connections: {connections}",
        "Notes:",
        *(f"- {note}" for note in s.notes),
    ]
    return "\n".join(lines)
