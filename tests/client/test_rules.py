"""The client's rules without a server: which failures are retried, how long it
waits (Retry-After honoured), how refusals are read, and what ``follow()`` does
with each message it may receive. The API's answers are played by
``httpx.MockTransport``; the waits are recorded instead of slept."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from httpx_sse import ServerSentEvent

from stint.client import (
    Client,
    EventsPruned,
    InvalidRequest,
    ProtocolError,
    RateLimited,
    ServerError,
    Unavailable,
    Unreachable,
)
from stint.client.follow import FollowState
from stint.client.retry import FollowPolicy, RetryPolicy, retry_after_seconds

KEY = "stk_" + "s3cr3t" * 8
SESSION_ID = str(uuid.uuid4())
SESSION: dict[str, Any] = {
    "id": SESSION_ID,
    "tenant": "a",
    "pin": None,
    "status": "idle",
    "last_event_seq": 0,
    "queued_turns": 0,
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:00Z",
    "parent_id": None,
    "depth": 0,
}
QUEUED = {"session_id": SESSION_ID, "turn_id": str(uuid.uuid4()), "seq": 1, "created": True}

Answer = Callable[[httpx.Request], httpx.Response]


def problem(status: int, detail: str, retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after else {}
    body = {"type": "about:blank", "title": "T", "status": status, "detail": detail}
    return httpx.Response(status, json=body, headers=headers)


class Script:
    """Answers in order (an exception is raised instead of answering); every request kept."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def client(script: Script, **kwargs: Any) -> Client:
    return Client("http://stint.test", KEY, transport=httpx.MockTransport(script), **kwargs)


def test_a_read_waits_out_a_503_for_at_least_its_retry_after(waits: list[float]) -> None:
    script = Script(problem(503, "database", "2"), httpx.Response(200, json=SESSION))
    assert str(client(script).get_session(SESSION_ID).id) == SESSION_ID
    assert len(script.requests) == 2 and len(waits) == 1 and waits[0] >= 2.0


def test_a_keyed_write_is_retried_with_its_key_and_a_429_too(waits: list[float]) -> None:
    script = Script(
        httpx.ReadError("reset"),
        problem(429, "queue full", "1"),
        httpx.Response(200, json={**QUEUED, "created": False}),
    )
    queued = client(script).enqueue(SESSION_ID, {"x": 1})
    keys = {r.headers["Idempotency-Key"] for r in script.requests}
    assert len(script.requests) == 3 and len(keys) == 1 and queued.created is False
    assert waits[1] >= 1.0


def test_busy_reject_is_not_retried(waits: list[float]) -> None:
    script = Script(problem(429, "busy", "1"))
    with pytest.raises(RateLimited) as refused:
        client(script).enqueue(SESSION_ID, {}, busy="reject")
    assert (len(script.requests), refused.value.retry_after, waits) == (1, 1.0, [])


def test_an_unkeyed_write_is_retried_only_when_it_cannot_have_arrived(
    waits: list[float],
) -> None:
    never_sent = Script(httpx.ConnectError("refused"), httpx.Response(201, json=SESSION))
    client(never_sent).create_session()
    assert len(never_sent.requests) == 2
    refused = Script(problem(429, "limit", "1"), httpx.Response(201, json=SESSION))
    client(refused).create_session()  # a refusal wrote nothing
    assert len(refused.requests) == 2
    for failure in (httpx.ReadError("reset"), problem(503, "db", "1")):
        script = Script(failure)
        with pytest.raises((Unreachable, Unavailable)):
            client(script).create_session()
        assert len(script.requests) == 1


def test_a_retry_after_longer_than_allowed_is_the_callers(waits: list[float]) -> None:
    script = Script(problem(503, "later", "3600"))
    with pytest.raises(Unavailable) as refused:
        client(script, retry=RetryPolicy(max_retry_after=30)).status()
    assert (refused.value.retry_after, len(script.requests), waits) == (3600.0, 1, [])


def test_attempts_are_bounded(waits: list[float]) -> None:
    script = Script(*[httpx.ConnectError("refused")] * 3)
    with pytest.raises(Unreachable) as lost:
        client(script, retry=RetryPolicy(attempts=3, first=0.1, cap=0.4)).status()
    assert len(script.requests) == 3 and "ConnectError: refused" in str(lost.value)
    assert all(0.05 <= w <= 0.4 for w in waits) and len(waits) == 2


def test_refusals_keep_their_problem_and_hide_the_key(waits: list[float]) -> None:
    script = Script(
        problem(422, "input: Field required"),
        httpx.Response(502, text="<html>Bad gateway</html>\n<p>nginx</p>"),
        httpx.Response(500, json={"title": "Internal Server Error", "status": 500, "detail": "x"}),
    )
    stint = client(script, retry=RetryPolicy(attempts=1))
    with pytest.raises(InvalidRequest) as invalid:
        stint.enqueue(SESSION_ID, {})
    assert invalid.value.problem["detail"] == "input: Field required"
    with pytest.raises(Unavailable) as gateway:
        stint.status()
    assert gateway.value.detail == "<html>Bad gateway</html>" and gateway.value.status == 502
    with pytest.raises(ServerError):
        stint.status()
    for text in (repr(stint), str(invalid.value), repr(invalid.value), str(gateway.value)):
        assert KEY not in text
    assert script.requests[0].headers["Authorization"] == f"Bearer {KEY}"
    with pytest.raises(ValueError) as bad:
        Client("http://stint.test", "not a token")
    assert "not a token" not in str(bad.value)


def test_an_answer_of_another_shape_is_a_protocol_error(waits: list[float]) -> None:
    with pytest.raises(ProtocolError) as odd:
        client(Script(httpx.Response(200, json={"id": "nope"}))).get_session(SESSION_ID)
    assert "not a Session" in str(odd.value)


def test_retry_after_is_seconds_or_an_http_date() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=90), usegmt=True)
    assert retry_after_seconds(later, now=now.timestamp()) == 90.0
    assert [retry_after_seconds(v) for v in ("120", "0.5", "-1", "soon", None)] == [
        120.0,
        0.5,
        None,
        None,
        None,
    ]


def _event(seq: int, kind: str = "tool.called", turn: uuid.UUID | None = None) -> ServerSentEvent:
    data: dict[str, Any] = {
        "session_id": SESSION_ID,
        "seq": seq,
        "kind": kind,
        "turn_id": str(turn or uuid.UUID(int=1)),
        "payload": {},
        "created_at": "2026-01-01T00:00:00Z",
    }
    return ServerSentEvent(event=kind, data=json.dumps(data), id=str(seq))


def _state(**kwargs: Any) -> FollowState:
    kwargs.setdefault("after", 0)
    kwargs.setdefault("until", "turn_end")
    kwargs.setdefault("turn_id", None)
    return FollowState(SESSION_ID, policy=FollowPolicy(), **kwargs)


def test_follow_delivers_each_seq_once_and_ends_on_the_turns_end() -> None:
    state = _state(after=2)
    assert state.receive(ServerSentEvent(retry=1000)) is None  # the retry advice
    assert state.receive(_event(2)) is None  # at or before the cursor: delivered already
    assert [state.receive(_event(s)) is not None for s in (3, 4)] == [True, True]
    assert state.receive(_event(4)) is None and not state.done
    ended = state.receive(_event(5, "turn.failed"))
    assert ended is not None and ended.ends_turn and state.done and state.cursor == 5
    assert state.request()["headers"]["Last-Event-ID"] == "5"


def test_follow_with_a_turn_goes_past_the_other_turns_ends() -> None:
    mine = uuid.uuid4()
    state = _state(turn_id=mine)
    assert state.request()["params"] == []  # the API must not end the stream early
    state.receive(_event(1, "turn.completed"))
    assert not state.done
    state.receive(_event(2, "turn.completed", mine))
    assert state.done
    with pytest.raises(ValueError):
        _state(turn_id=mine, until=None)
    with pytest.raises(ValueError):
        _state(after=-1)


def test_follow_never_skips_a_gap() -> None:
    state = _state(after=3)
    with pytest.raises(EventsPruned) as gap:
        state.receive(_event(9))
    assert (gap.value.after, gap.value.first_available) == (3, 9) and state.cursor == 3
    notice = ServerSentEvent(
        event="pruned", data=json.dumps({"after": 3, "pruned_through": 6, "next_seq": 7})
    )
    with pytest.raises(EventsPruned) as told:
        _state(after=3).receive(notice)
    assert told.value.first_available == 7 and "events 4..6 were pruned" in str(told.value)


def test_follow_gives_up_after_its_limit_with_no_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    state = FollowState(
        SESSION_ID,
        after=0,
        until=None,
        turn_id=None,
        policy=FollowPolicy(first=0.1, cap=1.0, give_up_after=30),
    )
    delays = [state.ended("refused") for _ in range(6)]
    assert all(d <= 1.0 for d in delays) and delays[-1] >= 0.5 and state.reconnects == 6
    clock[0] += 20
    state.receive(_event(1))  # progress resets the clock and the backoff
    clock[0] += 25
    assert state.ended("refused") <= 0.1
    clock[0] += 10
    with pytest.raises(Unreachable) as gave_up:
        state.ended("refused")
    assert "no event for 30s" in str(gave_up.value)


def test_a_signal_goes_to_its_documented_route_keyed_and_retried(waits: list[float]) -> None:
    """POST /v1/sessions/{id}/signals/{name} (issue 23): the name one escaped path
    segment, the payload in the body, one key for every retry of the call."""
    kept = {
        "session_id": SESSION_ID,
        "signal_id": str(uuid.uuid4()),
        "name": "ci/done",
        "created": True,
    }
    script = Script(httpx.ReadError("reset"), httpx.Response(201, json=kept))
    sent = client(script).signal(SESSION_ID, "ci/done", {"ok": True})
    assert sent.model_dump(mode="json") == kept
    first, retry = script.requests
    assert first.url.raw_path.decode() == f"/v1/sessions/{SESSION_ID}/signals/ci%2Fdone"
    assert json.loads(first.content) == {"payload": {"ok": True}}
    assert first.headers["Idempotency-Key"] == retry.headers["Idempotency-Key"]
    assert first.headers["Idempotency-Key"].startswith("stint-client-")
