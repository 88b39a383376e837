"""Request bodies are judged before any handler, or the framework, parses them.

An ASGI middleware reads the body up to ``api_max_body_bytes`` (413 beyond,
by ``Content-Length`` or by counting), then checks that it is JSON PostgreSQL
can hold (``stint.store.jsonvalues``: valid UTF-8, nested at most
``STINT_MAX_INPUT_DEPTH`` deep, no NaN or Infinity, no number too large, no
``\\u0000`` or unpaired surrogate). A refusal is one problem+json line and
nothing reaches the store.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stint.api.problems import problem_response
from stint.store.errors import UnstorableJson
from stint.store.jsonvalues import load_storable_json

__all__ = ["BodyLimits", "JsonRefused", "check_json"]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_FORM = "application/x-www-form-urlencoded"


class JsonRefused(ValueError):
    """A body that is not JSON, or not JSON that PostgreSQL's jsonb can hold."""


def check_json(raw: bytes, *, max_depth: int) -> Any:
    """The parsed body, or ``JsonRefused`` with one line saying why not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise JsonRefused("the body is not valid UTF-8") from None
    try:
        return load_storable_json(text, max_depth=max_depth, what="the body")
    except UnstorableJson as exc:
        raise JsonRefused(exc.message) from None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


class BodyLimits:
    """Pure ASGI, so a refused body is never buffered past the limit."""

    def __init__(
        self, app: ASGIApp, *, max_bytes: int, max_depth: int, form_prefix: str | None = None
    ) -> None:
        self._app = app
        self._max_bytes = max_bytes
        self._max_depth = max_depth
        # The dashboard's HTML forms post urlencoded bodies (still size-limited here;
        # their fields are checked by the handlers, an answer as JSON like any other).
        self._form_prefix = form_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self._app(scope, receive, send)
            return
        refusal = self._declared_too_large(scope)
        body = b""
        if refusal is None:
            body, refusal = await self._read(receive)
        if refusal is None and body:
            refusal = self._judge(scope, body)
        if refusal is not None:
            status, detail = refusal
            await problem_response(status, detail)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self._app(scope, replay, send)

    def _declared_too_large(self, scope: Scope) -> tuple[int, str] | None:
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max_bytes:
            return 413, f"the body is {declared} bytes; at most {self._max_bytes} are accepted"
        return None

    async def _read(self, receive: Receive) -> tuple[bytes, tuple[int, str] | None]:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b"", (400, "the client went away before the body arrived")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_bytes:
                return b"", (413, f"the body is over {self._max_bytes} bytes, the limit")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None

    def _judge(self, scope: Scope, body: bytes) -> tuple[int, str] | None:
        content_type = _header(scope, b"content-type") or ""
        if (
            self._form_prefix is not None
            and str(scope.get("path", "")).startswith(self._form_prefix)
            and content_type.split(";", 1)[0].strip().lower() == _FORM
        ):
            return None
        if not _is_json(content_type):
            return 415, "send the body as JSON with Content-Type: application/json"
        try:
            check_json(body, max_depth=self._max_depth)
        except JsonRefused as exc:
            return 400, str(exc)
        return None
