"""Provider quota around each request a model step makes.

Before every provider try (a retry is another request the provider counts)
the step reserves one request and an estimated token count in its scope's
window (``stint.store.quotas``; one statement, shared by every worker). When
the scope is full, the database says when enough frees: a wait of at most
``STINT_QUOTA_WAIT_IN_PLACE`` is spent in the slot and the reservation tried
again; a longer one raises ``Deferred``, and the runner hands the turn back
with that not-before time so the slot serves someone else meanwhile.

After the try the reservation is settled with the usage the provider
reported (the over-estimate refunded, an under-estimate recorded as debt); a
refusal with a status (429, 5xx, 4xx) is settled at zero tokens, the request
still counted; a try that ended without usage (a dropped connection, a
timeout, a cancel) is settled unknown, its estimate kept counted.

The estimate: ``ceil(characters of the JSON of the messages and tools /
STINT_QUOTA_CHARS_PER_TOKEN)`` plus the request's ``max_tokens`` (or
``STINT_QUOTA_OUTPUT_TOKENS`` when it sets none). Counting characters of the
JSON overestimates the prompt for real tokenizers (about four characters a
token for English, and JSON punctuation costs characters, not tokens), and
the completion cannot exceed ``max_tokens``; so with the defaults the tokens
counted for a request in flight bound what it will cost, and the window
holds even before the provider answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stint.agents.errors import AgentError
from stint.store.errors import QuotaScopeUnknown, StoreError
from stint.worker.context import Deferred, TurnContext
from stint.worker.telemetry import record_quota_wait

__all__ = ["QuotaConfig", "QuotaGate", "QuotaScopeMissing", "QuotaTooSmall", "estimate_tokens"]

log = logging.getLogger("stint.agents.quota_gate")

# A full scope whose requests are all still in flight frees when one of them
# ends, which nobody can say: ask again after this long (in the slot while the
# in-place budget lasts; otherwise the turn is handed back for as long).
_BUSY_RETRY_SECONDS = 0.05
_BUSY_DEFER_SECONDS = 1.0


class QuotaScopeMissing(AgentError):
    """STINT_MODEL_QUOTA_SCOPE names a scope that does not exist: the turn fails (a
    store error would hand it back, and it would come back to fail again)."""


class QuotaTooSmall(AgentError):
    """The request's token estimate exceeds the scope's whole tpm: it can never run."""


@dataclass(frozen=True)
class QuotaConfig:
    """Which scope the model calls count against, and how they wait and estimate."""

    scope: str
    wait_in_place: float = 2.0
    chars_per_token: float = 3.0
    output_tokens: int = 1024


def estimate_tokens(request: Mapping[str, Any], config: QuotaConfig) -> int:
    """The tokens reserved for ``request`` (see the module doc)."""
    prompt = json.dumps(request.get("messages") or []) + json.dumps(request.get("tools") or [])
    output = request.get("max_tokens")
    completion = int(output) if isinstance(output, int) else config.output_tokens
    return math.ceil(len(prompt) / config.chars_per_token) + completion


def reported_tokens(usage: Mapping[str, int | None]) -> int | None:
    """What the provider says the request cost; None when it did not say."""
    prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
    if prompt is None or completion is None:
        return None
    return prompt + completion


class QuotaGate:
    """The quota of one model step: ``reserve`` before each try, ``settle`` after."""

    def __init__(self, ctx: TurnContext, config: QuotaConfig, step_key: str, estimate: int) -> None:
        self._ctx = ctx
        self._config = config
        self._step_key = step_key
        self._estimate = estimate
        self.waited = 0.0
        """Seconds this model call has waited for quota in its slot, all tries together."""

    @property
    def scope(self) -> str:
        return self._config.scope

    def _key(self, attempt: int) -> str:
        return f"{self._step_key}#{attempt}"

    async def reserve(self, attempt: int) -> None:
        """Hold one request of the scope for this try; wait in place while the
        wait fits what is left of the call's in-place budget, else raise
        ``Deferred`` (the slot is given up)."""
        scope = self._config.scope
        while True:
            try:
                grant = await self._ctx.quota_reserve(scope, self._key(attempt), self._estimate)
            except QuotaScopeUnknown:
                raise QuotaScopeMissing(
                    f"quota scope {scope!r} (STINT_MODEL_QUOTA_SCOPE) does not exist; "
                    f"`stint quota set {scope}` creates it"
                ) from None
            if grant.granted:
                return
            if grant.too_big:
                raise QuotaTooSmall(
                    f"a model request estimated at {self._estimate} tokens can never fit "
                    f"quota scope {scope!r}: raise its --tpm or lower the request's size"
                )
            budget = self._config.wait_in_place - self.waited
            wait = grant.wait_seconds
            if wait is None and budget > 0:
                wait = min(_BUSY_RETRY_SECONDS, budget)
            if wait is None or wait > budget:
                later = _BUSY_DEFER_SECONDS if wait is None else wait
                record_quota_wait(scope, later)
                raise Deferred(scope, later, waited=self.waited)
            record_quota_wait(scope, wait)
            await asyncio.sleep(wait)
            self.waited += wait

    async def settle(self, attempt: int, tokens: int | None) -> None:
        """The try ended: it cost ``tokens`` (None: not known)."""
        await self._ctx.quota_settle(self._config.scope, self._key(attempt), tokens)

    async def abandon(self, attempt: int) -> None:
        """The try was cut short (cancelled, or failed without usage): settle it
        unknown, even while the task is being cancelled. A failure to do so is
        logged, not raised: the next reservation in the scope finds the request
        orphaned once its turn has moved on, and counts it unknown then."""
        try:
            await asyncio.shield(self.settle(attempt, None))
        except (StoreError, asyncio.CancelledError) as exc:
            log.warning("quota scope %s: request left open (%s)", self._config.scope, exc)
