"""Query strings hold only the parameters the OpenAPI spec documents for the
route, and no NUL: ``?aftr=5`` is a 422 naming the typo (as an unknown body
field is), not a silently ignored option that replays a whole log."""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import FastAPI, Request

from stint.api.problems import ApiProblem

__all__ = ["documented_query"]


@cache
def _documented(app: FastAPI) -> dict[tuple[str, str], frozenset[str]]:
    spec: dict[str, Any] = app.openapi()
    return {
        (method.upper(), path): frozenset(
            p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"
        )
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
    }


async def documented_query(request: Request) -> None:
    """A dependency of every route: refuse undocumented or NUL-bearing parameters."""
    route = request.scope.get("route")
    path = getattr(route, "path", None)
    if path is None:
        return
    allowed = _documented(request.app).get((request.method, path), frozenset())
    for name, value in request.query_params.multi_items():
        if name not in allowed:
            raise ApiProblem(422, f"unknown query parameter {name!r}")
        if "\x00" in value:
            raise ApiProblem(422, f"query parameter {name!r} contains NUL")
