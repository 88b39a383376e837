"""``Authorization: Bearer <API key>`` on every /v1 route; read-only keys may not write.

The key's tenant scopes everything the request can see or touch: handlers
pass it to every store call, and a session of another tenant is simply not
found (404), so a caller cannot even learn that it exists.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from stint.api.gate import gated_caller
from stint.api.problems import ApiProblem
from stint.api.services import services
from stint.store.keys import Caller

__all__ = ["Reader", "Writer", "bearer_scheme", "reader", "writer"]

bearer_scheme = _bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key from `stint keys create --tenant T`, as `Authorization: Bearer stk_…`",
)


async def reader(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> Caller:
    """Any live key: the caller and its tenant (verified already by ``AuthGate``,
    before the body was read; verified here when a route is mounted without it)."""
    gated = gated_caller(request.scope)
    if gated is not None:
        return gated
    if credentials is None:
        raise ApiProblem(401, "send an API key as Authorization: Bearer <key>")
    caller = await services(request).keys.keys_verify(token=credentials.credentials)
    if caller is None:
        raise ApiProblem(401, "the API key is not valid (unknown, revoked or mistyped)")
    return caller


async def writer(caller: Annotated[Caller, Depends(reader)]) -> Caller:
    """A key that may write: read-only keys get 403."""
    if caller.read_only:
        raise ApiProblem(403, "this API key is read-only")
    return caller


Reader = Annotated[Caller, Depends(reader)]
Writer = Annotated[Caller, Depends(writer)]
