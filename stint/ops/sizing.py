"""Size a deployment from measured costs: how many workers, how many slots each.

The model (docs/guide/sizing.md says it in words):

1. Slots: busy slots = rate x active turn seconds (Little's law), plus room by
   the larger of headroom and queueing (``stint.ops.sizing_slots``).
2. A worker's CPU, in ms per second, with one worker lost (the survivors carry
   everything): its background (the larger of idle, polling for work, and
   busy, every slot waiting) + its turns per second x CPU per turn + its busy
   slots x CPU per slot-second of waiting (never below zero). It must stay
   within ``cpu_target`` of the worker's CPU budget.
3. A worker's memory: base RSS + slots x RSS per slot, within its budget.
4. Connections: workers x connections per worker; PostgreSQL's CPU: rate x its
   CPU per turn + the workers' idle polling.
5. Workers: the fewest N such that N - spare workers carry the slots needed
   with at most ``max_slots_per_worker`` each, within both budgets; slots per
   worker = ceil(slots needed / (N - spare)). The other options shown divide
   the same slots into smaller workers (less lost per crash, more processes).

Every cost is a measured range (``stint.ops.sizing_costs``). The answer is
computed at the top of every range, then recomputed with each figure at the
bottom of its range, and with all of them there: when any of those answers
differs, the output names the deciding figure instead of claiming stability.
Pure computation: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from stint.ops.sizing_costs import CostModel, CostPoint, SizingError
from stint.ops.sizing_slots import SlotsNeeded, ceil_exact, erlang_c, slots_needed

__all__ = [
    "Budget",
    "Option",
    "Sizing",
    "Stability",
    "Workload",
    "size",
]

_STEPS = (256, 128, 64, 32, 16, 8, 4)
"""Slot counts the alternatives divide the same slots into (fewer than 4 per worker
buys little blast radius for a process each)."""
_ALTERNATIVES = 4
_MAX_SPARE = 10
_MAX_SLOTS = 256  # the worker's own bound on --slots


@dataclass(frozen=True)
class Workload:
    """What the user runs: the arrival rate and how long a turn holds a slot."""

    rate: float
    turn_seconds: float
    headroom: float = 0.3
    wait_target: float = 0.01


@dataclass(frozen=True)
class Budget:
    """What one worker may use, and the rules of the deployment around it."""

    worker_cpu: float = 1.0
    cpu_target: float = 0.5
    worker_memory_mib: float = 128.0
    max_slots_per_worker: int | None = None
    """None: the most slots per worker the report measured."""
    spare_workers: int = 1
    slots_per_worker: int | None = None
    """Set: size with exactly this many slots per worker instead of choosing."""
    lease_seconds: float = 30.0
    drain_seconds: float = 30.0


@dataclass(frozen=True)
class Option:
    """One way to deploy the slots: N workers x S slots, and what it costs."""

    workers: int
    slots_per_worker: int
    total_slots: int
    slots_after_one_lost: int
    memory_mib_per_worker: float
    memory_mib: float
    db_connections: int
    worker_cpu_ms_per_s: float
    """One worker's CPU with one worker lost (its share of the load at its largest)."""
    worker_cpu_share_of_budget: float
    postgres_cpu_cores: float | None
    wait_probability: float
    """Erlang C: the share of turns that would wait for a slot, all workers up."""
    crash_sessions: int
    """Sessions a crashed worker held on average: they resume after their lease."""
    drain_turns: int
    """Turns a draining worker finishes (or hands back past the drain budget)."""
    fits: bool
    why_not: list[str] = field(default_factory=list)
    recommended: bool = False

    @property
    def shape(self) -> str:
        return f"{self.workers} x {self.slots_per_worker}"


@dataclass(frozen=True)
class Stability:
    """Whether the recommendation survives every figure moving within its range."""

    stable: bool
    checked: list[str]
    deciding: list[dict[str, Any]]
    """Each figure whose low end changes the answer: its name, value and that answer."""


@dataclass(frozen=True)
class Sizing:
    """A deployment size for one workload: the options, the pick and why."""

    workload: Workload
    budget: Budget
    max_slots_per_worker: int
    slots: SlotsNeeded
    recommended: Option | None
    rule: str
    options: list[Option]
    stability: Stability
    costs: dict[str, Any]
    notes: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "workload": asdict(self.workload),
            "budget": {**asdict(self.budget), "max_slots_per_worker": self.max_slots_per_worker},
            "slots": self.slots.as_json(),
            "recommended": None if self.recommended is None else _option_json(self.recommended),
            "rule": self.rule,
            "options": [_option_json(o) for o in self.options],
            "stability": asdict(self.stability),
            "costs": self.costs,
            "notes": self.notes,
        }


def _option_json(option: Option) -> dict[str, Any]:
    return {"shape": option.shape, **asdict(option)}


def _check(workload: Workload, budget: Budget, model: CostModel) -> int:
    """Refuse inputs the arithmetic cannot mean; the slots-per-worker cap in force."""
    for name, value in (("rate", workload.rate), ("turn seconds", workload.turn_seconds)):
        if not (math.isfinite(value) and value > 0):
            raise SizingError(f"{name} must be a positive number, not {value}")
    if not (0 <= workload.headroom <= 10):
        raise SizingError(f"headroom must be between 0 and 10, not {workload.headroom}")
    if not (0 < workload.wait_target < 1):
        raise SizingError(f"wait target must be between 0 and 1, not {workload.wait_target}")
    if not (math.isfinite(budget.worker_cpu) and 0 < budget.worker_cpu <= 1024):
        raise SizingError(f"worker CPU must be between 0 and 1024 cores, not {budget.worker_cpu}")
    if not (0 < budget.cpu_target <= 1):
        raise SizingError(f"CPU target must be above 0 and at most 1, not {budget.cpu_target}")
    if not (math.isfinite(budget.worker_memory_mib) and budget.worker_memory_mib > 0):
        raise SizingError(
            f"worker memory must be a positive number of MiB, not {budget.worker_memory_mib}"
        )
    if not (0 <= budget.spare_workers <= _MAX_SPARE):
        raise SizingError(
            f"spare workers must be between 0 and {_MAX_SPARE}, not {budget.spare_workers}"
        )
    for name, seconds in (("lease", budget.lease_seconds), ("drain", budget.drain_seconds)):
        if not (math.isfinite(seconds) and seconds >= 0):
            raise SizingError(f"{name} seconds must be zero or more, not {seconds}")
    for name, slots in (
        ("slots per worker", budget.slots_per_worker),
        ("max slots per worker", budget.max_slots_per_worker),
    ):
        if slots is not None and not (1 <= slots <= _MAX_SLOTS):
            raise SizingError(f"{name} must be between 1 and {_MAX_SLOTS}, not {slots}")
    cap = budget.max_slots_per_worker or model.max_slots_measured
    if budget.slots_per_worker is not None:
        cap = max(cap, budget.slots_per_worker)
    return cap


def _option(
    workers: int,
    spw: int,
    *,
    workload: Workload,
    budget: Budget,
    cap: int,
    costs: CostPoint,
) -> Option:
    """The figures of N workers x S slots, at one point of the cost ranges."""
    survivors = max(1, workers - budget.spare_workers)
    busy = workload.rate * workload.turn_seconds
    busy_per_worker = busy / survivors
    background = max(costs.idle_worker_cpu_ms_per_s, costs.busy_worker_cpu_ms_per_s or 0.0)
    waiting = max(0.0, costs.wait_worker_cpu_ms_per_slot_s or 0.0)
    cpu = (
        background
        + workload.rate / survivors * costs.worker_cpu_ms_per_turn
        + min(busy_per_worker, spw) * waiting
    )
    share = cpu / (1000 * budget.worker_cpu)
    memory = costs.rss_mib_base + spw * costs.rss_mib_per_slot
    postgres = None
    if costs.pg_cpu_ms_per_turn is not None:
        polling = workers * (costs.idle_pg_cpu_ms_per_s or 0.0)
        postgres = (workload.rate * costs.pg_cpu_ms_per_turn + polling) / 1000
    why_not = []
    if spw > cap:
        why_not.append(f"{spw} slots per worker is above the cap of {cap}")
    if share > budget.cpu_target:
        why_not.append(
            f"a worker would use {share:.0%} of its {budget.worker_cpu:g} CPU, above the "
            f"{budget.cpu_target:.0%} target"
        )
    if memory > budget.worker_memory_mib:
        why_not.append(
            f"a worker would need {memory:.0f} MiB, above its {budget.worker_memory_mib:g} MiB"
        )
    total = workers * spw
    return Option(
        workers=workers,
        slots_per_worker=spw,
        total_slots=total,
        slots_after_one_lost=(workers - 1) * spw,
        memory_mib_per_worker=round(memory, 1),
        memory_mib=round(workers * memory, 1),
        db_connections=ceil_exact(workers * costs.db_connections_per_worker),
        worker_cpu_ms_per_s=round(cpu, 2),
        worker_cpu_share_of_budget=round(share, 4),
        postgres_cpu_cores=None if postgres is None else round(postgres, 3),
        wait_probability=round(erlang_c(total, busy), 6),
        crash_sessions=min(spw, math.ceil(busy / workers)),
        drain_turns=min(spw, math.ceil(busy / workers)),
        fits=not why_not,
        why_not=why_not,
    )


def _candidates(needed: int, budget: Budget, cap: int) -> list[tuple[int, int]]:
    """(workers, slots per worker) from the fewest workers up: each worker count with
    the fewest slots per worker that still carry ``needed`` with the spares lost."""
    spare = budget.spare_workers
    if budget.slots_per_worker is not None:
        spw = budget.slots_per_worker
        return [(math.ceil(needed / spw) + spare, spw)]
    found = []
    previous = None
    for carrying in range(max(1, math.ceil(needed / cap)), needed + 1):
        spw = math.ceil(needed / carrying)
        if spw != previous:
            found.append((carrying + spare, spw))
            previous = spw
        if spw == 1:
            break
    return found


def _pick(
    needed: int, workload: Workload, budget: Budget, cap: int, costs: CostPoint
) -> Option | None:
    """The first candidate that fits: the fewest workers within both budgets."""
    for workers, spw in _candidates(needed, budget, cap):
        option = _option(workers, spw, workload=workload, budget=budget, cap=cap, costs=costs)
        if option.fits:
            return option
    return None


def _alternatives(
    chosen: Option | None,
    needed: int,
    workload: Workload,
    budget: Budget,
    cap: int,
    costs: CostPoint,
) -> list[Option]:
    """The same slots in smaller workers, at the usual slot counts below the pick's."""
    top = chosen.slots_per_worker if chosen else cap + 1
    found: list[Option] = []
    for spw in _STEPS:
        if spw >= top or spw > cap or len(found) == _ALTERNATIVES:
            continue
        workers = math.ceil(needed / spw) + budget.spare_workers
        found.append(_option(workers, spw, workload=workload, budget=budget, cap=cap, costs=costs))
    return found


def _shape(option: Option | None) -> str:
    return "nothing fits" if option is None else option.shape


def _stability(model: CostModel, chosen: Option | None, pick: Any) -> Stability:
    """Recompute the pick with each measured figure at the low end of its range
    (the rest at the top), then with all of them low."""
    checked, deciding = [], []
    for name, measured in model.figures.items():
        if measured is None or measured.low == measured.high:
            continue
        checked.append(name)
        other = pick(model.point("high", **{name: measured.low}))
        if _shape(other) != _shape(chosen):
            deciding.append({"figure": name, "at": measured.low, "recommended": _shape(other)})
    lowest = pick(model.point("low"))
    if _shape(lowest) != _shape(chosen) and not deciding:
        deciding.append(
            {"figure": "all figures at once", "at": None, "recommended": _shape(lowest)}
        )
    return Stability(stable=not deciding, checked=checked, deciding=deciding)


def _rule(slots: SlotsNeeded, budget: Budget, cap: int, chosen: Option | None) -> str:
    if budget.slots_per_worker is not None:
        return (
            f"{budget.slots_per_worker} slots per worker as asked (--slots-per-worker); "
            f"workers = ceil({slots.needed} / {budget.slots_per_worker}) "
            f"+ {budget.spare_workers} spare"
        )
    lost = budget.spare_workers
    spare = "with no worker spare" if lost == 0 else f"after losing {lost} (N+{lost})"
    if chosen is None:
        return f"no configuration carries {slots.needed} slots {spare} within the budgets"
    return (
        f"the fewest workers that still carry {slots.needed} slots {spare}, at most {cap} "
        f"slots per worker, each within {budget.cpu_target:.0%} of {budget.worker_cpu:g} CPU and "
        f"{budget.worker_memory_mib:g} MiB"
    )


def _costs_used(model: CostModel) -> dict[str, Any]:
    return {
        "harness": model.harness,
        "figures": {k: (None if v is None else v.as_json()) for k, v in model.figures.items()},
        "yours": dict(model.overridden),
        "claim_p95_ms": None if model.claim_p95_ms is None else model.claim_p95_ms.as_json(),
        "configurations_used": model.configurations_used,
        "configurations_failed": model.configurations_failed,
        "max_slots_measured": model.max_slots_measured,
        "harness_max_slots": model.harness_max_slots,
        "cpu_bound": [
            {
                **asdict(c),
                "host_cpu_busy": None if c.host_cpu_busy is None else c.host_cpu_busy.as_json(),
            }
            for c in model.cpu_bound
        ],
        "machine_cpus": model.machine_cpus,
        "report_generated_at": model.generated_at,
        "report_command": model.command,
    }


def _notes(
    model: CostModel, workload: Workload, budget: Budget, cap: int, chosen: Option | None
) -> list[str]:
    notes = []
    if cap > model.max_slots_measured:
        notes.append(
            f"up to {cap} slots per worker: beyond the {model.max_slots_measured} the report "
            "measured, memory and CPU are extrapolated along the measured line"
        )
    if chosen is not None and chosen.slots_per_worker > model.harness_max_slots:
        notes.append(
            f"the {model.harness} harness was measured with at most {model.harness_max_slots} "
            f"slots per worker: its per-turn costs are taken to hold at {chosen.slots_per_worker}"
            f" as the report measured slots up to {model.max_slots_measured} with the "
            "scripted fixture"
        )
    missing = [name for name, value in model.figures.items() if value is None]
    if missing:
        notes.append(f"not measured by the report, counted as zero: {', '.join(missing)}")
    if model.overridden:
        notes.append(
            "your figure replaces the report's worker CPU per turn; memory, connections and "
            f"PostgreSQL's CPU stay the {model.harness} harness's: a harness with more steps "
            "costs the database more (measure it)"
        )
    if chosen is not None and workload.turn_seconds > budget.drain_seconds:
        notes.append(
            f"turns of {workload.turn_seconds:g} s outlast the {budget.drain_seconds:g} s drain "
            "budget: a drained worker hands its unfinished turns back, and they restart from "
            "their last committed step (raise STINT_DRAIN_SECONDS above your turns' p99)"
        )
    notes.append(
        "turn seconds is the mean *active* time: a turn parked on an approval or a question "
        "holds no slot; a long tool does"
    )
    return notes


def size(model: CostModel, workload: Workload, budget: Budget | None = None) -> Sizing:
    """Options and a recommendation for ``workload`` from ``model``'s measured costs."""
    budget = budget or Budget()
    cap = _check(workload, budget, model)
    try:
        slots = slots_needed(
            workload.rate,
            workload.turn_seconds,
            headroom=workload.headroom,
            wait_target=workload.wait_target,
        )
    except ValueError as exc:
        raise SizingError(str(exc)) from None

    def pick(costs: CostPoint) -> Option | None:
        return _pick(slots.needed, workload, budget, cap, costs)

    top = model.point("high")
    chosen = pick(top)
    first: list[Option] = []
    if chosen is not None:
        chosen = replace(chosen, recommended=True)
        first = [chosen]
    elif budget.slots_per_worker is not None:  # shown with why it does not fit
        workers, spw = _candidates(slots.needed, budget, cap)[0]
        first = [_option(workers, spw, workload=workload, budget=budget, cap=cap, costs=top)]
    options = [*first, *_alternatives(chosen, slots.needed, workload, budget, cap, top)]
    return Sizing(
        workload=workload,
        budget=budget,
        max_slots_per_worker=cap,
        slots=slots,
        recommended=chosen,
        rule=_rule(slots, budget, cap, chosen),
        options=options,
        stability=_stability(model, chosen, pick),
        costs=_costs_used(model),
        notes=_notes(model, workload, budget, cap, chosen),
    )
