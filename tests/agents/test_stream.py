"""The delta coalescer: order, batch bounds, attempts, errors (no database)."""

from __future__ import annotations

from typing import Any

import pytest

from stint.agents.stream import DeltaCoalescer
from tests.polling import wait_until


class Sink:
    def __init__(self, fail: bool = False) -> None:
        self.events: list[dict[str, Any]] = []
        self.fail = fail

    async def write(self, payload: dict[str, Any]) -> None:
        if self.fail:
            raise RuntimeError("lease lost")
        self.events.append(payload)


async def test_count_bound_splits_batches_in_order() -> None:
    sink = Sink()
    deltas = DeltaCoalescer(sink.write, base={"step_key": "k"}, flush_seconds=60, flush_deltas=4)
    for i in range(10):
        deltas.add(f"{i} ")
    await deltas.close()
    assert [e["count"] for e in sink.events] == [4, 4, 2]
    assert [e["index"] for e in sink.events] == [0, 4, 8]
    assert "".join(e["text"] for e in sink.events) == "".join(f"{i} " for i in range(10))
    assert all(e["step_key"] == "k" and e["try"] == 1 for e in sink.events)
    assert (deltas.events, deltas.deltas) == (3, 10)


async def test_time_bound_writes_a_lone_delta_without_more_arriving() -> None:
    sink = Sink()
    deltas = DeltaCoalescer(sink.write, base={}, flush_seconds=0.01, flush_deltas=1000)
    deltas.add("hello")

    async def written() -> bool:
        return bool(sink.events)

    await wait_until(written, what="the lone delta was written", within=10)
    assert sink.events[0]["text"] == "hello"
    await deltas.close()
    assert len(sink.events) == 1


async def test_a_new_try_flushes_the_old_one_and_numbers_from_zero() -> None:
    sink = Sink()
    deltas = DeltaCoalescer(sink.write, base={}, flush_seconds=60, flush_deltas=100)
    deltas.add("par")
    deltas.add("tial")
    await deltas.new_try(2)
    deltas.add("whole")
    await deltas.close()
    assert [(e["try"], e["index"], e["text"]) for e in sink.events] == [
        (1, 0, "partial"),
        (2, 0, "whole"),
    ]


async def test_a_failed_write_reaches_the_stream() -> None:
    deltas = DeltaCoalescer(Sink(fail=True).write, base={}, flush_seconds=0.001, flush_deltas=1)
    deltas.add("x")
    with pytest.raises(RuntimeError, match="lease lost"):
        await deltas.close()


async def test_close_hands_what_is_left_to_the_last_writer() -> None:
    sink, last = Sink(), Sink()
    deltas = DeltaCoalescer(sink.write, base={}, flush_seconds=60, flush_deltas=2)
    for text in ("a", "b", "c"):
        deltas.add(text)  # the writer never gets to run before the close
    await deltas.close(last=last.write)
    assert sink.events == []
    assert [(e["index"], e["count"], e["text"]) for e in last.events] == [(0, 2, "ab"), (2, 1, "c")]
    assert deltas.events == 2
