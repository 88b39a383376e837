"""How many slots a workload needs: Little's law, headroom, and Erlang C.

Busy slots on average = turns arriving per second x seconds a turn is active
(Little's law; a parked turn holds no slot). Two rules then add room, and the
larger answer wins, named in ``SlotsNeeded.rule``:

- *headroom*: busy x (1 + headroom), for bursts and growth above the stated
  mean rate (30 % by default);
- *queueing*: the fewest slots with which, at the stated mean rate, at most
  ``wait_target`` of the turns would wait for a slot at all (Erlang C: Poisson
  arrivals, every slot alike). It decides for small workloads, where random
  arrivals pile up far beyond a percentage of a small mean.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["MAX_BUSY_SLOTS", "SlotsNeeded", "ceil_exact", "erlang_c", "slots_needed"]

MAX_BUSY_SLOTS = 1_000_000
"""Beyond this the arithmetic is not the question: see docs/capacity.md."""
# rate x seconds x (1 + headroom) is float arithmetic: 1 x 10 x 1.3 is 13.000000000000002,
# and ceil() of that must still be 13, so products are rounded this far before ceil().
_DECIMALS = 9


def ceil_exact(value: float) -> int:
    """ceil() of a product of decimal inputs, without float noise adding one."""
    return math.ceil(round(value, _DECIMALS))


def _erlang_b(servers: int, load: float) -> float:
    """Erlang B (an arrival finds every server busy, none waiting), by its stable
    recurrence over the server count."""
    blocked = 1.0
    for k in range(1, servers + 1):
        blocked = load * blocked / (k + load * blocked)
    return blocked


def _waits(servers: int, load: float, blocked: float) -> float:
    """Erlang C from Erlang B at the same server count."""
    return servers * blocked / (servers - load * (1 - blocked))


def erlang_c(servers: int, load: float) -> float:
    """The probability that an arrival waits, with ``servers`` and ``load`` Erlangs
    offered (M/M/c); 1 when the servers cannot keep up on average."""
    if servers <= load:
        return 1.0
    return _waits(servers, load, _erlang_b(servers, load))


def _fewest_servers(load: float, target: float) -> int:
    """The least server count whose Erlang C is at most ``target``."""
    servers = max(1, math.floor(load) + 1)
    blocked = _erlang_b(servers, load)
    while _waits(servers, load, blocked) > target:
        servers += 1
        blocked = load * blocked / (servers + load * blocked)
    return servers


@dataclass(frozen=True)
class SlotsNeeded:
    """The slots a workload needs, and which rule decided."""

    busy: float
    by_headroom: int
    by_queueing: int
    needed: int
    rule: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def slots_needed(
    rate: float, turn_seconds: float, *, headroom: float, wait_target: float
) -> SlotsNeeded:
    """Slots for ``rate`` turns/s each active ``turn_seconds`` (see the module's rule)."""
    busy = rate * turn_seconds
    if busy > MAX_BUSY_SLOTS:
        raise ValueError(
            f"{busy:,.0f} busy slots is beyond what this arithmetic is for "
            f"({MAX_BUSY_SLOTS:,}): see docs/capacity.md"
        )
    by_headroom = max(1, ceil_exact(busy * (1 + headroom)))
    by_queueing = _fewest_servers(round(busy, _DECIMALS), wait_target)
    needed = max(by_headroom, by_queueing)
    rule = "headroom" if by_headroom >= by_queueing else "queueing"
    return SlotsNeeded(
        busy=round(busy, _DECIMALS),
        by_headroom=by_headroom,
        by_queueing=by_queueing,
        needed=needed,
        rule=rule,
    )
