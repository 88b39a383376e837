"""The fake provider's "model": a deterministic answer for each chat request.

No state between requests: the answer depends only on the messages, so a
retried or replayed call gets the same answer, and many sessions can share one
fake. A script is a list of rules; the first rule whose ``when`` text occurs in
the last user message (case-insensitive; empty matches anything) answers. The
*round* is how many assistant messages follow that user message: round ``r``
answers with the rule's ``rounds[r]`` tool calls, and once the rounds are used
up, with its ``reply``. Replies may use ``{results}`` (the tool results since
the user message, joined), ``{history}`` (how many messages came before it)
and ``{user}`` (its text). Arguments are sent exactly as written, so a script
can send malformed ones on purpose.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEMO_SCRIPT", "LOAD_SCRIPT", "FakeCall", "FakePlan", "FakeRule", "FakeScript"]


@dataclass(frozen=True)
class FakeCall:
    """A tool call the fake model makes; ``arguments`` as JSON text or an object."""

    name: str
    arguments: str | Mapping[str, Any] = "{}"

    def text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), sort_keys=True)


@dataclass(frozen=True)
class FakeRule:
    when: str = ""
    rounds: tuple[tuple[FakeCall, ...], ...] = ()
    reply: str = "Done."

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> FakeRule:
        rounds = tuple(
            tuple(FakeCall(c["name"], c.get("arguments", "{}")) for c in calls)
            for calls in value.get("rounds", [])
        )
        return cls(str(value.get("when", "")), rounds, str(value.get("reply", "Done.")))


@dataclass(frozen=True)
class FakePlan:
    """One answer: text or tool calls, with the round it answers and its token counts."""

    user: str
    round: int
    content: str | None
    calls: list[dict[str, str]]
    usage: dict[str, int]

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.calls else "stop"

    def content_pieces(self) -> list[str]:
        """The content as the deltas a model would stream: word by word."""
        return re.findall(r"\S+\s*|\s+", self.content or "")


@dataclass(frozen=True)
class FakeScript:
    rules: Sequence[FakeRule] = field(default_factory=tuple)

    @classmethod
    def from_json(cls, value: Sequence[Mapping[str, Any]]) -> FakeScript:
        return cls(tuple(FakeRule.from_json(v) for v in value))

    def plan(self, messages: Sequence[Mapping[str, Any]], *, call_prefix: str) -> FakePlan:
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        user = _text(messages[last_user]) if last_user >= 0 else ""
        after = messages[last_user + 1 :]
        round_ = sum(1 for m in after if m.get("role") == "assistant")
        rule = next((r for r in self.rules if r.when.lower() in user.lower()), FakeRule())
        calls: list[dict[str, str]] = []
        content: str | None = None
        if round_ < len(rule.rounds):
            calls = [
                {"id": f"{call_prefix}_{round_}_{j}", "name": c.name, "arguments": c.text()}
                for j, c in enumerate(rule.rounds[round_])
            ]
        else:
            earlier = sum(1 for m in messages[: max(last_user, 0)] if m.get("role") != "system")
            results = "; ".join(_text(m) for m in after if m.get("role") == "tool")
            content = (
                rule.reply.replace("{results}", results)
                .replace("{history}", str(earlier))
                .replace("{user}", user)
            )
        prompt = _tokens(json.dumps(list(messages), sort_keys=True))
        cached = _tokens(json.dumps(list(messages[: max(last_user, 0)]), sort_keys=True))
        answer = (content or "") + "".join(c["name"] + c["arguments"] for c in calls)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": _tokens(answer),
            "cached_tokens": cached if last_user > 0 else 0,
        }
        return FakePlan(user, round_, content, calls, usage)


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _tokens(text: str) -> int:
    """A stand-in tokenizer: about four characters a token."""
    return max(1, math.ceil(len(text) / 4))


DEMO_SCRIPT = FakeScript(
    (
        FakeRule(
            when="19 + 23",
            rounds=((FakeCall("add", {"a": 19, "b": 23}),),),
            reply="I asked the calculator: 19 + 23 = {results}.",
        ),
        FakeRule(
            when="note",
            rounds=((FakeCall("note", {"text": "19 + 23 = 42"}),),),
            reply="Saved to your journal, exactly once, even if a worker crashes.",
        ),
        FakeRule(
            when="deploy",
            rounds=((FakeCall("deploy", {"service": "web", "version": "1.2.3"}),),),
            reply="Deployment: {results}.",
        ),
        FakeRule(
            reply="I remember {history} earlier messages of this conversation. You said: {user}"
        ),
    )
)
"""What ``stint-lab demo --agent`` and ``python -m stint.lab.fake_provider`` answer."""

LOAD_SCRIPT = FakeScript(
    (
        FakeRule(
            when="",
            rounds=((FakeCall("note", {"text": "load test"}),),),
            reply="Noted.",
        ),
    )
)
"""The load test's turn: one model call asking for the journal tool, then the reply."""
