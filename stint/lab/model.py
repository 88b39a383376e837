"""What a load case is, and the shape of the figures it reports.

The JSON a case writes is ``CaseReport.as_json()``; ``matrix.json`` holds a
list of them. Anything not measured is ``None`` (JSON null), never a zero.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "AGENT_MODEL_CALLS_PER_TURN",
    "HARNESSES",
    "SCHEMA_VERSION",
    "Backend",
    "CaseReport",
    "CaseSpec",
    "Costs",
    "PhaseFigures",
    "Samples",
]

SCHEMA_VERSION = 2
"""2: each case's ``costs`` (CPU per turn, idle and waiting, the host's busy share),
the claim latency of each burst, and the ``sizing`` profile ``stint size`` reads."""

HARNESSES = ("scripted", "agents", "openai-agents", "pydantic-ai")
"""The scripted fixture, ``stint.agents:chat``, and the two SDK adapters' load agents."""
AGENT_MODEL_CALLS_PER_TURN = 2
"""An agent load turn: a model call asking for the note tool, the tool, the reply."""


@dataclass(frozen=True)
class CaseSpec:
    """One cell of the matrix, one repetition.

    ``harness``: ``scripted`` (each turn journals one effect and waits
    ``tool_wait_ms``), ``agents`` (``stint.agents:chat`` against the fake
    provider; each turn is two model calls of ``model_latency_ms`` to the first
    token around one journal tool call), or an adapter (``openai-agents``,
    ``pydantic-ai``: the same turn from an SDK agent with one ``note`` tool).
    """

    workers: int
    slots: int
    sessions: int
    tool_wait_ms: int
    rep: int = 1
    harness: str = "scripted"
    model_latency_ms: int = 0

    @property
    def label(self) -> str:
        if self.harness != "scripted":
            return (
                f"{self.harness}-{self.workers}x{self.slots}-{self.sessions}s-"
                f"{self.model_latency_ms}ms-r{self.rep}"
            )
        return f"{self.workers}x{self.slots}-{self.sessions}s-{self.tool_wait_ms}ms-r{self.rep}"

    @property
    def turn_ms(self) -> int:
        """The least time one turn can take: its waits, model calls included."""
        calls = AGENT_MODEL_CALLS_PER_TURN if self.harness != "scripted" else 0
        return self.tool_wait_ms + calls * self.model_latency_ms

    @property
    def total_slots(self) -> int:
        return self.workers * self.slots

    @property
    def physical_limit(self) -> float:
        """Turns/s if every slot ran back to back: sessions / (waves * turn time)."""
        waves = math.ceil(self.sessions / self.total_slots)
        return self.sessions / (waves * self.turn_ms / 1000)


@dataclass(frozen=True)
class Backend:
    """Where PostgreSQL ran and what limits applied ("unlimited" when none)."""

    kind: str  # "container" | "local-cgroup" | "local" | "url"
    postgres_limits: dict[str, Any] | str
    worker_limits: dict[str, Any] | str
    postgres_version: str | None = None


@dataclass(frozen=True)
class PhaseFigures:
    """One burst's figures, from PostgreSQL audit timestamps."""

    turns: int
    succeeded: int
    interval_s: float
    turns_per_s: float
    fraction_of_limit: float
    e2e_p50_s: float | None
    e2e_p95_s: float | None
    e2e_max_s: float | None
    queue_wait_p95_s: float | None
    # From a worker's finish to its next start, for starts that followed one of
    # its finishes while work was waiting: the per-wave overhead (None: no such start).
    handoff_p50_ms: float | None = None
    handoff_p95_ms: float | None = None
    # Enqueue to start of the turns that found a slot free (the burst's first wave):
    # what a claim costs a turn when capacity is there (None: no such turn).
    claim_p50_ms: float | None = None
    claim_p95_ms: float | None = None


@dataclass(frozen=True)
class Samples:
    """Summaries of the 100 ms samples (short peaks between samples can be missed)."""

    count: int
    interval_s: float
    peak_sum_rss_mib: float | None
    peak_rss_mib_per_worker: list[float]
    peak_uss_mib_per_worker: list[float]
    worker_cpu_seconds: float | None
    max_threads_per_worker: int | None
    max_fds_per_worker: int | None
    max_active_sessions: int | None
    db_connections_per_worker: float | None
    pg_peak_memory_mib: float | None
    pg_oom_kills: int | None


@dataclass(frozen=True)
class Costs:
    """What a case's turns cost, each figure measured over a phase of its own.

    Worker figures are summed over the case's workers and divided as named;
    PostgreSQL's are the whole server's (None for a container or URL backend,
    which has no postmaster to read). ``worker_cpu_ms_per_turn``: the workers' CPU
    over the warm burst divided by its turns (the polls and renewals meanwhile
    included). ``idle_*``: per worker and second with nothing queued (a worker with
    a free slot polls for work). ``busy_worker_cpu_ms_per_s``: per worker and
    second while ``hold_busy_slots`` turns, one per slot, all waited in their
    tools; ``wait_worker_cpu_ms_per_slot_s``: the same above idle, per busy slot
    and second (below zero when waiting slots cost less than polling free ones;
    None for the agents harness, whose waits are model calls). ``host_cpu_busy``: the
    whole machine's busy share during the warm burst, every process counted;
    ``cpu_bound`` when it reached 0.9 or the burst ran at 0.8 of the CPU ceiling
    (the turns/s at which workers and PostgreSQL would use every core: the
    machine's cores over the two's CPU ms per turn); ``cpu_ceiling_fraction``: the
    warm burst's turns/s over that ceiling.
    """

    worker_cpu_ms_per_turn: float | None
    pg_cpu_ms_per_turn: float | None
    idle_worker_cpu_ms_per_s: float | None
    idle_pg_cpu_ms_per_s: float | None
    busy_worker_cpu_ms_per_s: float | None
    wait_worker_cpu_ms_per_slot_s: float | None
    hold_busy_slots: int | None
    host_cpu_busy: float | None
    cpu_ceiling_turns_per_s: float | None
    cpu_bound: bool | None
    load_average: list[float]
    cpu_ceiling_fraction: float | None = None


@dataclass
class CaseReport:
    """Everything one case measured and checked."""

    spec: CaseSpec
    backend: Backend
    environment: dict[str, Any]
    configuration: dict[str, Any]
    cold: PhaseFigures | None = None
    warm: PhaseFigures | None = None
    samples: Samples | None = None
    costs: Costs | None = None
    idle_drain_s: float | None = None
    # The warm burst's enqueue: one transaction of one turn per session, as the
    # producer timed it (its commit included).
    warm_enqueue_ms: float | None = None
    worker_exit_codes: list[int] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    diagnostics: str | None = None
    # The warm burst turn by turn: [worker index, enqueued, started, finished] in ms
    # from the burst's first enqueue (database clock).
    timeline: list[list[float]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c["passed"] for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "case": {**asdict(self.spec), "label": self.spec.label},
            "physical_limit_turns_per_s": round(self.spec.physical_limit, 3),
            "backend": asdict(self.backend),
            "environment": self.environment,
            "configuration": self.configuration,
            "phases": {
                "cold": asdict(self.cold) if self.cold else None,
                "warm": asdict(self.warm) if self.warm else None,
            },
            "samples": asdict(self.samples) if self.samples else None,
            "costs": asdict(self.costs) if self.costs else None,
            "idle_drain_s": self.idle_drain_s,
            "warm_enqueue_ms": self.warm_enqueue_ms,
            "worker_exit_codes": self.worker_exit_codes,
            "checks": self.checks,
            "passed": self.passed,
            "diagnostics": self.diagnostics,
            "timeline": self.timeline,
        }
