"""free_port: a port no outgoing connection can take before the process binds it."""

from __future__ import annotations

import random
import socket

import pytest

from stint.lab.free_port import _ephemeral_start, free_port


def test_the_port_is_below_the_ephemeral_range_and_binds() -> None:
    start = _ephemeral_start()
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= port < start for port in ports)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_bound_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        taken = held.getsockname()[1]
        other = free_port()
        picks = iter([taken, other])
        monkeypatch.setattr(random, "randrange", lambda low, high: next(picks))
        assert free_port() == other
