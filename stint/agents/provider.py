"""One model call against an OpenAI-compatible chat-completions endpoint.

The official ``openai`` client (``AsyncOpenAI``) does the HTTP and the SSE
parsing; its own retries are off (``max_retries=0``) because the durable step
owns them: a 429, a 5xx, a dropped connection or a stream cut short is retried
here, inside the one ``call_model`` step, after the wait the provider asked for
(``retry-after-ms`` / ``retry-after``) or an exponential backoff, for at most
``max_attempts`` tries; the turn's time limit bounds the whole. Any other 4xx
fails the call with the provider's own message, the API key scrubbed from it.

The request goes out as it is (``client.post``, the SDK's documented way to
send a request it does not type): ``chat.completions.create`` first walks every
message against the SDK's typed parameters (``async_maybe_transform``), which
for chat requests changes nothing but cost 20 ms of CPU a request once a
conversation had a few dozen messages. Streamed chunks are read as the JSON
they are (``AsyncStream[object]``), not built into the SDK's models. The SDK
still does the request, the authentication, the SSE parsing and the errors;
under its httpx client the connections are Stint's lean HTTP/1.1 transport
(``stint.agents.http11``: httpx's own transport cost more worker CPU than the
rest of a turn), except where a proxy variable applies, which httpx's own
transport handles as before.

This module imports ``openai`` (and its HTTP stack), so only the agents
harness imports it: a worker running another harness never loads them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stint.agents.config import ModelConfig
from stint.agents.errors import AgentConfigError, ProviderError, ProviderUnavailable
from stint.agents.http11 import Http11Transport
from stint.agents.quota_gate import QuotaGate, reported_tokens
from stint.agents.retry import RetryPolicy, is_retryable_status, retry_after_seconds
from stint.worker.telemetry import model_span, record_usage

try:
    import httpx2
    import openai
except ImportError as exc:  # the optional dependency: pip install 'stint[agents]'
    raise AgentConfigError(
        "stint.agents needs the openai package: pip install 'stint[agents]'"
    ) from exc

__all__ = ["ChatProvider", "Retry"]


def _http_client(base_url: str) -> httpx2.AsyncClient | None:
    """The SDK's HTTP client over the lean transport (``stint.agents.http11``); None
    (the SDK's default client) where a proxy variable applies to the base URL's
    scheme (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, any case): httpx then
    routes through the proxy exactly as before, ``NO_PROXY`` included."""
    proxies = urllib.request.getproxies_environment()
    scheme = httpx2.URL(base_url).scheme
    if proxies.get(scheme) or proxies.get("all"):
        return None
    return httpx2.AsyncClient(transport=Http11Transport(), follow_redirects=True)


log = logging.getLogger("stint.agents.provider")

_CONNECT_TIMEOUT = 10.0
_NO_KEY = "no-key"
_HTTP_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2", "openai")
_MAX_MESSAGE = 500
_CHAT_PATH = "/chat/completions"
_STREAM = {"stream": True, "stream_options": {"include_usage": True}}
# Masked keys some providers echo back ("sk-abc***xyz"): never repeated either.
_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_\-*]{4,}")


@dataclass(frozen=True)
class Retry:
    """A failed try about to be retried: which one, why, and the wait before the next."""

    attempt: int
    reason: str
    delay: float
    status: int | None = None


class _StreamIncomplete(Exception):
    """The stream ended before the model said it had finished."""


@dataclass
class _Assembly:
    """A streamed answer put back together."""

    content: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, int | None] = field(
        default_factory=lambda: {"input_tokens": None, "output_tokens": None, "cached_tokens": None}
    )
    model: str | None = None

    def message(self) -> dict[str, Any]:
        text = "".join(self.content)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call["id"] or f"call_{index}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for index, call in sorted(self.calls.items())
            ]
        return message


def _add_chunk(answer: _Assembly, chunk: dict[str, Any], on_delta: Callable[[str], None]) -> None:
    """One streamed chunk (its JSON) into the answer: text, tool-call parts, the end."""
    answer.model = answer.model or chunk.get("model")
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        details = usage.get("prompt_tokens_details")
        answer.usage = {
            "input_tokens": usage.get("prompt_tokens"),
            "output_tokens": usage.get("completion_tokens"),
            "cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else None,
        }
    for choice in (chunk.get("choices") or [])[:1]:
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if content:
            answer.content.append(content)
            on_delta(content)
        for part in delta.get("tool_calls") or ():
            call = answer.calls.setdefault(part["index"], {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or (part.get("id") or "")
            function = part.get("function")
            if function is not None:
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
        if choice.get("finish_reason"):
            answer.finish_reason = choice["finish_reason"]


class ChatProvider:
    """Streams chat completions; ``complete`` is the body of one ``call_model`` step."""

    def __init__(self, config: ModelConfig) -> None:
        # The HTTP client logs each request's URL at INFO: a line per model call, and a
        # base URL may carry credentials. Its warnings and errors still get through.
        for name in _HTTP_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        self._config = config
        self._secret = config.api_key.get_secret_value()
        self._policy = RetryPolicy(max_attempts=config.max_attempts, cap=config.retry_max_wait)
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url,
            # Local servers (vLLM, llama.cpp, Ollama) need no key; the client needs one.
            api_key=self._secret or _NO_KEY,
            max_retries=0,
            timeout=openai.Timeout(config.timeout, connect=min(_CONNECT_TIMEOUT, config.timeout)),
            http_client=_http_client(config.base_url),
        )

    @property
    def model(self) -> str:
        return self._config.model

    async def complete(
        self,
        request: Mapping[str, Any],
        *,
        on_delta: Callable[[str], None],
        on_retry: Callable[[Retry], Awaitable[None]],
        quota: QuotaGate | None = None,
    ) -> dict[str, Any]:
        """The assistant message with its usage and the retries it took; with
        ``quota``, each try first reserves its request (see ``stint.agents.quota_gate``)."""
        with model_span(self._config.model) as current:
            attempt = 1
            while True:
                try:
                    answer = await self._try(request, on_delta, quota, attempt)
                except openai.APIStatusError as exc:
                    status = exc.status_code
                    if not is_retryable_status(status):
                        raise ProviderError(
                            f"the provider refused the request (HTTP {status}): "
                            f"{self._provider_message(exc)}",
                            status=status,
                        ) from None
                    hint = retry_after_seconds(exc.response.headers)
                    failure = Retry(attempt, f"HTTP {status}", 0.0, status)
                except openai.APITimeoutError:
                    hint, failure = None, Retry(attempt, "timed out", 0.0)
                except openai.APIConnectionError:
                    hint, failure = None, Retry(attempt, "connection lost", 0.0)
                except _StreamIncomplete:
                    hint, failure = None, Retry(attempt, "stream ended early", 0.0)
                except openai.APIError as exc:  # e.g. an error event inside the stream
                    raise ProviderError(
                        f"the provider failed the request: {self.scrub(str(exc))[:_MAX_MESSAGE]}"
                    ) from None
                else:
                    current.set_attribute("stint.model.retries", attempt - 1)
                    record_usage(
                        current,
                        answer.usage,
                        answer.finish_reason,
                        scope=quota.scope if quota is not None else self._config.model,
                        response_model=answer.model,
                    )
                    return {
                        "message": answer.message(),
                        "finish_reason": answer.finish_reason,
                        "usage": answer.usage,
                        "retries": attempt - 1,
                        "model": answer.model,
                        "quota_wait_s": None if quota is None else round(quota.waited, 3),
                    }
                if attempt >= self._policy.max_attempts:
                    raise ProviderUnavailable(
                        f"the provider failed {attempt} attempts; last: {failure.reason}",
                        status=failure.status,
                    )
                delay = self._policy.delay(attempt, hint)
                log.info(
                    "model call failed (%s); retry %d in %.2fs", failure.reason, attempt, delay
                )
                await on_retry(Retry(attempt, failure.reason, delay, failure.status))
                await asyncio.sleep(delay)
                attempt += 1

    async def _try(
        self,
        request: Mapping[str, Any],
        on_delta: Callable[[str], None],
        quota: QuotaGate | None,
        attempt: int,
    ) -> _Assembly:
        """One request, inside its quota reservation when there is one."""
        if quota is None:
            return await self._once(request, on_delta)
        await quota.reserve(attempt)
        try:
            answer = await self._once(request, on_delta)
        except openai.APIStatusError:
            await quota.settle(attempt, 0)  # answered with a status: no tokens spent
            raise
        except BaseException:
            await quota.abandon(attempt)  # no usage known: the estimate stays counted
            raise
        await quota.settle(attempt, reported_tokens(answer.usage))
        return answer

    async def _once(self, request: Mapping[str, Any], on_delta: Callable[[str], None]) -> _Assembly:
        answer = _Assembly()
        stream = await self._client.post(
            _CHAT_PATH,
            body={**request, **_STREAM},
            options={"security": {"bearer_auth": True}},
            cast_to=object,
            stream=True,
            stream_cls=openai.AsyncStream[object],
        )
        async with stream:
            async for chunk in stream:
                if isinstance(chunk, dict):
                    _add_chunk(answer, chunk, on_delta)
        if answer.finish_reason is None:
            raise _StreamIncomplete()
        return answer

    def _provider_message(self, exc: openai.APIStatusError) -> str:
        body = exc.body
        message: Any = None
        if isinstance(body, dict):
            error = body.get("error", body)
            message = error.get("message") if isinstance(error, dict) else error
        return self.scrub(str(message or exc.message))[:_MAX_MESSAGE]

    def scrub(self, text: str) -> str:
        """``text`` without the API key (whole, or masked the way providers echo it)."""
        if self._secret:
            text = text.replace(self._secret, "[redacted]")
        return _KEY_LIKE.sub("[redacted]", text)

    async def close(self) -> None:
        await self._client.close()
