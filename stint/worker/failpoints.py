"""Failpoints: named places where a fault test makes the worker crash, stall or fail.

Enabled only by ``STINT_FAILPOINTS=name:action[,name:action...]`` with the
actions ``kill`` (SIGKILL this process), ``pause:SECONDS`` (stop the whole
process, as a GC pause or a SIGSTOP would) and ``raise`` (raise
``FailpointError`` into the normal error paths). Unset, ``failpoint()`` is one
dictionary lookup on an empty dict.
"""

from __future__ import annotations

import os
import signal
import time

from stint.errors import StintError

__all__ = [
    "BACKGROUND_FAILPOINTS",
    "FAILPOINTS",
    "HARNESS_FAILPOINTS",
    "FailpointError",
    "configure",
    "failpoint",
]

FAILPOINTS = (
    "after_claim",  # the claim committed (its turns started); no slot has run
    "after_step_started",  # a step is recorded started; its effect has not run
    "after_effect",  # the effect is fsync'd; the step is not committed
    "after_step_commit",  # the step and its events are committed
    "after_turn_finish",  # the turn finished and the slot's next one started; neither runs
)
# Failpoints of the scheduler and the webhook deliverer: reached only when a schedule is
# due or a delivery is (tests/faults/test_schedule_faults.py, test_webhook_faults.py).
BACKGROUND_FAILPOINTS = (
    "schedule_before_commit",  # a pass enqueued its ticks' turns; nothing is committed yet
    "schedule_after_commit",  # a pass committed its ticks; the scheduler has not gone on
    "webhook_after_claim",  # a delivery's attempt is claimed; no request was sent
    "webhook_after_send",  # the receiver answered; the attempt's outcome is not recorded
)
# Failpoints inside a harness: reached only when that harness runs.
HARNESS_FAILPOINTS = (
    "after_tool_step",  # agents harness, adapters: a tool step returned; no model call since
    "mcp_before_call",  # an MCP tool step is recorded started; the call is not sent
    "mcp_after_call",  # the MCP server answered the call; its result is not journaled
    # Reached only by a harness that waits or spawns (tests/acceptance/test_signals.py,
    # test_children.py):
    "after_wait_begun",  # a wait step is recorded started with its deadline; not settled
    "after_wait_settled",  # a wait step committed (its signal consumed); the turn goes on
    "after_spawn",  # a child session and the spawn step are committed; the turn goes on
)

_active: dict[str, str] = {}


class FailpointError(StintError):
    """Raised by a failpoint set to ``raise``."""


def configure(spec: str) -> None:
    """Parse ``name:action,...``; refuse unknown names or actions loudly."""
    _active.clear()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition(":")
        known = (*FAILPOINTS, *HARNESS_FAILPOINTS, *BACKGROUND_FAILPOINTS)
        if name not in known:
            raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(known)}")
        kind, _, arg = action.partition(":")
        if kind not in ("kill", "pause", "raise") or (kind == "pause") != bool(arg):
            raise ValueError(f"failpoint action must be kill, pause:SECONDS or raise: {item!r}")
        if kind == "pause":
            float(arg)
        _active[name] = action


def failpoint(name: str) -> None:
    """Act if ``name`` is enabled; otherwise return at once."""
    action = _active.get(name)
    if action is None:
        return
    kind, _, arg = action.partition(":")
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "pause":
        time.sleep(float(arg))  # blocks the event loop on purpose: the whole worker stalls
    else:
        raise FailpointError(f"failpoint {name}")
