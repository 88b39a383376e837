"""Fuzz the running API with schemathesis, from the OpenAPI spec it serves.

Every operation gets generated requests, valid and invalid (schemathesis'
positive and negative modes), with a valid key of tenant a, on random ids and
on a real session of a's (except the event stream, which on a real session
would rightly never end). No answer may be a 5xx, and every answer must be
one the spec documents: status, content type, body schema, headers.
Bounded per operation, so the whole run stays well under a minute.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Err
from schemathesis.specs.openapi import checks as openapi_checks

from tests.api.conftest import ApiServer, Keys, bearer

EXAMPLES_PER_OPERATION = 40
CHECKS = [
    schemathesis.checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.negative_data_rejection,
]


# schemathesis leaves an operation's parameter, response and schema types open.
Operation = schemathesis.APIOperation[Any, Any, Any, Any]


def _strategy(operation: Operation, token: str, session_id: str) -> Any:
    auth = bearer(token)
    modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
    options = [operation.as_strategy(generation_mode=mode, headers=auth) for mode in modes]
    if "{session_id}" in operation.path and not operation.path.endswith("/events"):
        options.append(
            operation.as_strategy(
                generation_mode=GenerationMode.POSITIVE,
                headers=auth,
                path_parameters={"session_id": session_id},
            )
        )
    return st.one_of(options)


def _fuzz(base_url: str, token: str, session_id: str) -> Counter[int]:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    operations: list[Operation] = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise result.err()
        operations.append(result.ok())
    assert len(operations) >= 11
    statuses: Counter[int] = Counter()
    for operation in operations:

        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=_strategy(operation, token, session_id))
        def conforms(case: schemathesis.Case[Operation]) -> None:
            response = case.call(base_url=base_url, timeout=30)
            statuses[response.status_code] += 1
            case.validate_response(response, checks=CHECKS)

        conforms()
    return statuses


async def test_the_api_conforms_to_its_spec_under_fuzzing(api: ApiServer, keys: Keys) -> None:
    async with httpx.AsyncClient(base_url=api.base_url) as client:
        created = await client.post("/v1/sessions", json={}, headers=bearer(keys.a))
    statuses = await asyncio.to_thread(_fuzz, api.base_url, keys.a, created.json()["id"])
    # The fuzz reached handlers, found and missed resources, and was refused input.
    assert {200, 201, 404, 422} <= set(statuses), statuses
    assert not [s for s in statuses if s >= 500], statuses
    assert "Traceback" not in api.log_text(), api.log_text()[-3000:]
    assert keys.a not in api.log_text()
