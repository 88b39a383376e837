"""SIGTERM handled as Ctrl-C, so a killed test run still tears down what it started.

A test run that gets SIGTERM (a CI time limit, an operator's ``kill``) dies by
default without running a single fixture teardown: its worker processes keep
running and its throwaway PostgreSQL clusters keep their cores and their /tmp
folders, and the next measurement on the machine is wrong. pytest tears
everything down on KeyboardInterrupt, so SIGTERM raises that.
"""

from __future__ import annotations

import signal
from types import FrameType

__all__ = ["sigterm_as_interrupt"]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def sigterm_as_interrupt() -> None:
    """From now on, SIGTERM to this process raises KeyboardInterrupt in its main thread."""
    signal.signal(signal.SIGTERM, _interrupt)
