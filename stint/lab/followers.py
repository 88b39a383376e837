"""Many SSE followers of many sessions, and what they prove and measure.

Each follower streams one session's events through the API and records, for
every event, its seq and kind, the database's ``created_at`` for it and the
client's wall clock when it arrived. It stops once it has seen the number of
terminal events it was told to expect. Afterwards ``judge`` compares every
follower's list with the session's log in PostgreSQL (every event exactly
once, in order), and ``latencies`` gives commit-to-client delays.

Clock caveat: ``created_at`` is ``clock_timestamp()`` when the event row was
inserted (just before its transaction commits) on the database server's
clock; the arrival time is the client's clock. Here both run on one machine
with one clock, so the difference is a true delay; it slightly overstates
commit-to-client (by the time from insert to commit). Across machines, clock
skew would add to it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from stint.lab.sse import SseStream
from stint.ops.checks import Check
from stint.ops.stats import percentile
from stint.store.vocabulary import EventKind

__all__ = ["Follower", "judge", "latency_figures", "open_followers"]

_TERMINAL = {str(kind) for kind in EventKind if kind.terminal}


@dataclass
class Follower:
    """One client's view of one session."""

    session_id: UUID
    seqs: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    keepalives: int = 0
    error: str | None = None
    task: asyncio.Task[None] | None = None

    async def run(self, stream: SseStream, terminal_events: int) -> None:
        seen_terminal = 0
        try:
            while seen_terminal < terminal_events:
                message = await stream.next()
                if message is None:
                    self.error = f"stream ended after seq {self.seqs[-1] if self.seqs else 0}"
                    return
                if message.comment is not None:
                    self.keepalives += 1
                    continue
                event = json.loads(message.text)
                self.seqs.append(int(message.id or 0))
                self.kinds.append(str(message.event))
                created = datetime.fromisoformat(event["created_at"]).timestamp()
                self.delays.append(message.received_at - created)
                if message.event in _TERMINAL:
                    seen_terminal += 1
        except Exception as exc:  # a failed follower is reported, never silently dropped
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            await stream.close()


async def open_followers(
    host: str,
    port: int,
    token: str,
    sessions: Sequence[UUID],
    *,
    per_session: int,
    terminal_events: int,
    concurrency: int = 50,
) -> list[Follower]:
    """Connect ``per_session`` followers to every session (``concurrency`` connects
    at a time) and start them; returns once every stream is open."""
    followers = [Follower(sid) for sid in sessions for _ in range(per_session)]
    gate = asyncio.Semaphore(concurrency)
    headers = {"Authorization": f"Bearer {token}"}

    async def connect(follower: Follower) -> None:
        async with gate:
            path = f"/v1/sessions/{follower.session_id}/events"
            stream = await SseStream.open(host, port, path, headers)
        follower.task = asyncio.create_task(follower.run(stream, terminal_events))

    await asyncio.gather(*(connect(f) for f in followers))
    return followers


def judge(followers: Sequence[Follower], logs: dict[UUID, list[tuple[int, str]]]) -> list[Check]:
    """Every follower received its session's whole log, each event once, in order."""
    wrong = []
    for follower in followers:
        expected = logs.get(follower.session_id, [])
        got = list(zip(follower.seqs, follower.kinds, strict=True))
        if follower.error is not None or got != expected:
            wrong.append(
                {
                    "session_id": str(follower.session_id),
                    "error": follower.error,
                    "received": len(got),
                    "expected": len(expected),
                    "duplicates": len(follower.seqs) - len(set(follower.seqs)),
                }
            )
    delivered = sum(len(f.seqs) for f in followers)
    expected_total = sum(len(logs.get(f.session_id, [])) for f in followers)
    return [
        Check(
            "every_follower_got_every_event_once_in_order",
            not wrong and delivered == expected_total and delivered > 0,
            {
                "followers": len(followers),
                "deliveries": delivered,
                "expected_deliveries": expected_total,
                "wrong_followers": len(wrong),
                "first_wrong": wrong[:5],
            },
        )
    ]


def latency_figures(followers: Sequence[Follower]) -> dict[str, float | int | None]:
    """Delivery delay (database insert time to client receipt), seconds."""
    delays = [d for f in followers for d in f.delays]

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 4)

    return {
        "deliveries": len(delays),
        "p50_s": rounded(percentile(delays, 50)),
        "p95_s": rounded(percentile(delays, 95)),
        "p99_s": rounded(percentile(delays, 99)),
        "max_s": rounded(max(delays)) if delays else None,
    }
