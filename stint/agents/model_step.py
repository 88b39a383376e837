"""One durable model call: the step every agent loop on Stint makes to ask a model.

``stint.agents:chat`` and the SDK adapters (``stint.adapters``) all call the
model through here, so each of them gets the same guarantees for free: the call
is one ``ctx.call_model`` step (recorded, replayed after a crash, never made
twice once committed), its tokens stream to followers as coalesced
``message.delta`` events, each provider try reserves quota first when a scope
is set, and failed tries are retried inside the step after the wait the
provider asked for, each announced by a ``model.retried`` event.

The request is an OpenAI chat-completions request (a dict); the recorded result
is the assistant message with its usage (see ``ChatProvider.complete``). An
adapter translates its framework's request into that shape and the recorded
message back, so a replay rebuilds exactly the answer the first attempt got.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from stint.agents.config import AgentConfig
from stint.agents.provider import ChatProvider, Retry
from stint.agents.quota_gate import QuotaGate, estimate_tokens
from stint.agents.stream import DeltaCoalescer
from stint.worker.context import TurnContext

__all__ = ["ModelStep"]


class ModelStep:
    """Calls the configured provider as durable steps; one per harness, shared by turns."""

    def __init__(self, config: AgentConfig, provider: ChatProvider) -> None:
        self._config = config
        self._provider = provider

    @property
    def model(self) -> str:
        """The model name requests carry unless the caller names another."""
        return self._provider.model

    async def call(self, ctx: TurnContext, key: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """The recorded answer to ``request`` at step ``key``: from the journal on a
        replay, else from the provider (streamed, retried, under quota)."""
        name = str(request.get("model") or self._provider.model)
        result: dict[str, Any] = await ctx.call_model(
            key, partial(self._body, ctx, key), request, name=name
        )
        return result

    async def close(self) -> None:
        await self._provider.close()

    async def _body(self, ctx: TurnContext, key: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """The body of one model step: stream, coalescing deltas into events."""

        async def write(payload: dict[str, Any]) -> None:
            await ctx.emit(payload, kind="message.delta")

        deltas = DeltaCoalescer(
            write,
            base={"step_key": key, "attempt": ctx.attempt},
            flush_seconds=self._config.stream.flush_seconds,
            flush_deltas=self._config.stream.flush_deltas,
        )

        async def on_retry(retry: Retry) -> None:
            await deltas.new_try(retry.attempt + 1)
            await ctx.emit(
                {
                    "step_key": key,
                    "attempt": ctx.attempt,
                    "try": retry.attempt,
                    "reason": retry.reason,
                    "status": retry.status,
                    "delay_s": round(retry.delay, 3),
                },
                kind="model.retried",
            )

        quota = self._config.quota
        gate = (
            None if quota is None else QuotaGate(ctx, quota, key, estimate_tokens(request, quota))
        )
        try:
            result = await self._provider.complete(
                request, on_delta=deltas.add, on_retry=on_retry, quota=gate
            )
        except BaseException:
            await deltas.abort()
            raise
        await deltas.close(last=partial(ctx.emit_at_step_end, key, kind="message.delta"))
        result["delta_events"] = deltas.events
        return result
