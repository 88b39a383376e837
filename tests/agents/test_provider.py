"""The provider client against the fake server over real loopback HTTP (no database).

Retries are counted by the step and checked against the fake's own request log;
waits are checked as lower bounds the client must respect (what the provider
asked for), never as performance thresholds.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pydantic import SecretStr

from stint.agents.config import ModelConfig
from stint.agents.errors import ProviderError, ProviderUnavailable
from stint.agents.provider import ChatProvider, Retry
from stint.lab.fake_provider import FakeProvider
from tests.agents.conftest import API_KEY
from tests.agents.raw_http import Answer, raw_server

QUESTION: list[dict[str, Any]] = [{"role": "user", "content": "What is 19 + 23?"}]
ANSWERED: list[dict[str, Any]] = [
    *QUESTION,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "42.0"},
]


class Calls:
    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.retries: list[Retry] = []

    def delta(self, text: str) -> None:
        self.deltas.append(text)

    async def retry(self, retry: Retry) -> None:
        self.retries.append(retry)


def _provider(fake: FakeProvider, *, attempts: int = 6) -> ChatProvider:
    config = ModelConfig(fake.url, "fake-model", SecretStr(API_KEY), max_attempts=attempts)
    return ChatProvider(config)


async def _complete(provider: ChatProvider, messages: list[dict[str, Any]], calls: Calls) -> Any:
    try:
        return await provider.complete(
            {"model": "fake-model", "messages": messages},
            on_delta=calls.delta,
            on_retry=calls.retry,
        )
    finally:
        await provider.close()


async def test_tool_calls_and_usage_are_assembled_from_the_stream(fake: FakeProvider) -> None:
    calls = Calls()
    result = await _complete(_provider(fake), QUESTION, calls)
    [call] = result["message"]["tool_calls"]
    assert call["function"] == {"name": "add", "arguments": '{"a": 19, "b": 23}'}
    assert result["finish_reason"] == "tool_calls"
    [request] = fake.requests()
    assert result["usage"] == {
        "input_tokens": request.usage["prompt_tokens"],
        "output_tokens": request.usage["completion_tokens"],
        "cached_tokens": request.usage["cached_tokens"],
    }
    assert result["retries"] == 0 and calls.deltas == []


async def test_text_streams_delta_by_delta(fake: FakeProvider) -> None:
    calls = Calls()
    result = await _complete(_provider(fake), ANSWERED, calls)
    assert result["message"] == {
        "role": "assistant",
        "content": "I asked the calculator: 19 + 23 = 42.0.",
    }
    assert "".join(calls.deltas) == result["message"]["content"]
    assert len(calls.deltas) > 1


async def test_a_429_burst_is_retried_after_the_requested_wait(fake: FakeProvider) -> None:
    fake.rate_limit(2, retry_after_ms=120)
    fake.rate_limit(1, retry_after=0.2)
    calls = Calls()
    result = await _complete(_provider(fake), ANSWERED, calls)
    assert result["retries"] == 3
    assert [r.status for r in calls.retries] == [429, 429, 429]
    assert [r.delay for r in calls.retries] == [0.12, 0.12, 0.2]
    log = fake.requests()
    assert [r.outcome for r in log] == ["status:429"] * 3 + ["ok"]
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(log)]
    assert gaps[0] >= 0.12 and gaps[1] >= 0.12 and gaps[2] >= 0.2


async def test_a_stream_cut_mid_way_is_retried_and_says_so(fake: FakeProvider) -> None:
    fake.drop_mid_stream(after_chunks=3)
    calls = Calls()
    result = await _complete(_provider(fake), ANSWERED, calls)
    assert result["message"]["content"] == "I asked the calculator: 19 + 23 = 42.0."
    assert [r.reason for r in calls.retries] == ["connection lost"]
    assert [r.outcome for r in fake.requests()] == ["dropped", "ok"]
    # The cut try's deltas were seen too: a follower tells tries apart by "try".
    assert "".join(calls.deltas).endswith(result["message"]["content"])


async def test_attempts_are_bounded(fake: FakeProvider) -> None:
    fake.server_error(3, status=503)
    calls = Calls()
    with pytest.raises(ProviderUnavailable, match="failed 2 attempts; last: HTTP 503"):
        await _complete(_provider(fake, attempts=2), ANSWERED, calls)
    assert len(fake.requests()) == 2


async def test_a_refusal_fails_at_once_with_the_message_and_never_the_key(
    fake: FakeProvider,
) -> None:
    fake.refuse(status=401, message="Incorrect API key provided: {authorization}")
    calls = Calls()
    with pytest.raises(ProviderError) as raised:
        await _complete(_provider(fake), QUESTION, calls)
    text = str(raised.value)
    assert "HTTP 401" in text and "Incorrect API key provided" in text
    assert API_KEY not in text and API_KEY[:12] not in text
    assert raised.value.status == 401 and calls.retries == []
    assert len(fake.requests()) == 1


async def test_a_slow_first_token_is_waited_for(fake: FakeProvider) -> None:
    fake.slow_first_token(1.5)
    calls = Calls()
    result = await _complete(_provider(fake), ANSWERED, calls)
    assert result["retries"] == 0 and result["message"]["content"]


def _sse_answer(*events: bytes) -> bytes:
    """A streamed chat answer as a provider sends it: SSE events in chunks."""
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        + (chunks + b"0\r\n\r\n")
    )


async def test_model_calls_one_after_another_share_one_connection() -> None:
    # Each answer ends with [DONE] and then the chunked body's end, which the SDK
    # drains so the connection can serve the next call (a new one per call would
    # cost a TLS handshake each against a real provider).
    answer = _sse_answer(
        b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n',
        b"data: [DONE]\n\n",
    )
    async with raw_server(lambda c, i: Answer(answer)) as server:
        provider = ChatProvider(ModelConfig(server.url, "m", SecretStr(API_KEY)))
        calls = Calls()
        try:
            for _ in range(3):
                result = await provider.complete(
                    {"model": "m", "messages": QUESTION}, on_delta=calls.delta, on_retry=calls.retry
                )
                assert result["message"]["content"] == "hi"
        finally:
            await provider.close()
    assert len(server.seen) == 3 and server.connections == 1


async def test_a_proxy_named_in_the_environment_carries_the_requests(
    fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where a proxy applies, httpx's own transport (which speaks to proxies) is used,
    # not the lean one: the request reaches the proxy in absolute form, never the server.
    for name in ("NO_PROXY", "ALL_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    refusal = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    async with raw_server(lambda c, i: Answer(refusal, close=True)) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        with pytest.raises(ProviderUnavailable, match="HTTP 502"):
            await _complete(_provider(fake, attempts=1), QUESTION, Calls())
    [seen] = proxy.seen
    assert seen.head.startswith(f"POST {fake.url}/chat/completions HTTP/1.1\r\n".encode())
    assert fake.requests() == []
