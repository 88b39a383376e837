"""The measured costs ``stint size`` computes with, read from a matrix report.

The load test writes them (``stint.lab.sizing_profile``: the ``sizing`` section
of ``matrix.json``, schema 2): per harness, each cost as the [min, max] range
over every configuration that passed its checks. Nothing here measures or
guesses: a figure the report lacks is ``None`` and said so, and a report too
old or too broken to size from is refused with a ``SizingError`` naming what
is missing. Pure reading: no I/O beyond the dictionary given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from stint.errors import StintError

__all__ = [
    "PROFILE_SCHEMA_VERSION",
    "CostModel",
    "CostPoint",
    "CpuBound",
    "Range",
    "SizingError",
    "cost_model",
]

PROFILE_SCHEMA_VERSION = 2
End = Literal["low", "high"]


class SizingError(StintError):
    """The report or the figures given cannot size a deployment; the message says why."""


@dataclass(frozen=True)
class Range:
    """A measured figure's spread: the least and the most seen."""

    low: float
    high: float

    def at(self, end: End) -> float:
        return self.low if end == "low" else self.high

    def as_json(self) -> list[float]:
        return [self.low, self.high]


@dataclass(frozen=True)
class CostPoint:
    """One value per figure: what one evaluation of the model computes with.

    Optional figures the report did not measure are ``None`` and count as zero
    cost in the arithmetic; the sizing says which ones were missing.
    """

    worker_cpu_ms_per_turn: float
    idle_worker_cpu_ms_per_s: float
    busy_worker_cpu_ms_per_s: float | None
    wait_worker_cpu_ms_per_slot_s: float | None
    pg_cpu_ms_per_turn: float | None
    idle_pg_cpu_ms_per_s: float | None
    rss_mib_base: float
    rss_mib_per_slot: float
    db_connections_per_worker: float


@dataclass(frozen=True)
class CpuBound:
    """A measured configuration in which the report's machine ran out of CPU."""

    configuration: str
    reps: int
    of: int
    host_cpu_busy: Range | None


@dataclass(frozen=True)
class CostModel:
    """A harness's cost ranges from one report, and what the report says of itself."""

    harness: str
    figures: Mapping[str, Range | None]
    """Every figure of ``CostPoint`` by name (None: not measured)."""
    claim_p95_ms: Range | None
    max_slots_measured: int
    """The most slots per worker the report measured, with any harness: the slots'
    own costs (memory, polling) do not depend on what runs in them."""
    harness_max_slots: int
    """The most slots per worker measured with this harness."""
    slots_measured: list[int]
    per_slot_from: str
    configurations_used: int
    configurations_failed: list[str]
    cpu_bound: list[CpuBound]
    machine_cpus: int | None
    generated_at: str | None
    command: str | None
    overridden: dict[str, float] = field(default_factory=dict)

    def point(self, end: End = "high", **at: float) -> CostPoint:
        """Every figure at ``end`` of its range, except those given by name."""
        values: dict[str, float | None] = {}
        for name, measured in self.figures.items():
            values[name] = (
                at[name] if name in at else (None if measured is None else measured.at(end))
            )
        return CostPoint(**values)  # type: ignore[arg-type]

    def with_figure(self, name: str, value: float) -> CostModel:
        """This model with one figure replaced by a value of the user's own."""
        return replace(
            self,
            figures={**self.figures, name: Range(value, value)},
            overridden={**self.overridden, name: value},
        )


_REQUIRED = (
    "worker_cpu_ms_per_turn",
    "idle_worker_cpu_ms_per_s",
    "db_connections_per_worker",
)
_OPTIONAL = (
    "busy_worker_cpu_ms_per_s",
    "wait_worker_cpu_ms_per_slot_s",
    "pg_cpu_ms_per_turn",
    "idle_pg_cpu_ms_per_s",
)
_MEMORY = ("rss_mib_base", "rss_mib_per_slot")
assert {f.name for f in fields(CostPoint)} == {*_REQUIRED, *_OPTIONAL, *_MEMORY}


def _range(value: Any, what: str) -> Range | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int | float) and math.isfinite(v) for v in value)
        or value[0] > value[1]
    ):
        raise SizingError(f"the report's {what} is not a [min, max] range of numbers")
    return Range(float(value[0]), float(value[1]))


def _section(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SizingError(f"the report has no {what}")
    return value


def _cpu_bound(entries: Any) -> list[CpuBound]:
    found = []
    for entry in entries if isinstance(entries, list) else []:
        entry = _section(entry, "CPU-bound entry")
        found.append(
            CpuBound(
                configuration=str(entry.get("configuration")),
                reps=int(entry.get("reps", 0)),
                of=int(entry.get("of", 0)),
                host_cpu_busy=_range(entry.get("host_cpu_busy"), "host CPU busy range"),
            )
        )
    return found


def cost_model(matrix: Mapping[str, Any], harness: str = "scripted") -> CostModel:
    """The ``harness``'s cost model from a parsed ``matrix.json``."""
    profile = _section(matrix.get("sizing"), "sizing section (is it a matrix report?)")
    version = profile.get("schema_version")
    if version != PROFILE_SCHEMA_VERSION:
        raise SizingError(
            f"the report's sizing section is schema {version or 1}, not "
            f"{PROFILE_SCHEMA_VERSION}: it predates per-turn costs; re-run the matrix "
            "(pytest loadtest --run-load) and size from its matrix.json"
        )
    harnesses = _section(profile.get("harnesses"), "harnesses in its sizing section")
    if harness not in harnesses:
        measured = ", ".join(sorted(harnesses)) or "none"
        raise SizingError(f"the report measured no {harness} harness (measured: {measured})")
    section = _section(harnesses[harness], f"{harness} section")
    costs = _section(section.get("costs"), f"costs for the {harness} harness")
    memory = _section(section.get("memory"), f"memory figures for the {harness} harness")
    figures: dict[str, Range | None] = {}
    for name in (*_REQUIRED, *_OPTIONAL):
        figures[name] = _range(costs.get(name), name.replace("_", " "))
    for name in _MEMORY:
        figures[name] = _range(memory.get(name), name.replace("_", " "))
    missing = [name for name in (*_REQUIRED, *_MEMORY) if figures[name] is None]
    if missing:
        raise SizingError(f"the report measured no {', '.join(missing)} for the {harness} harness")
    slots = section.get("max_slots_measured")
    if not isinstance(slots, int) or slots < 1:
        raise SizingError(f"the report has no measured slot count for the {harness} harness")
    widest = max(
        [slots]
        + [
            h["max_slots_measured"]
            for h in harnesses.values()
            if isinstance(h, dict) and isinstance(h.get("max_slots_measured"), int)
        ]
    )
    machine = profile.get("machine")
    cpus = machine.get("cpus") if isinstance(machine, dict) else None
    return CostModel(
        harness=harness,
        figures=figures,
        claim_p95_ms=_range(costs.get("claim_p95_ms"), "claim p95"),
        max_slots_measured=widest,
        harness_max_slots=slots,
        slots_measured=[int(s) for s in memory.get("slots_measured") or []],
        per_slot_from=str(memory.get("per_slot_from", "fit")),
        configurations_used=int(section.get("configurations_used") or 0),
        configurations_failed=[str(c) for c in section.get("configurations_failed") or []],
        cpu_bound=_cpu_bound(section.get("cpu_bound")),
        machine_cpus=cpus if isinstance(cpus, int) else None,
        generated_at=str(matrix["generated_at"]) if matrix.get("generated_at") else None,
        command=str(matrix["command"]) if matrix.get("command") else None,
    )
