"""The client's models and routes are checked against docs/openapi.json: a field
added, removed, retyped or made optional on either side, an operation the
client does not call or calls wrongly, fails here (no database needed).

Types are compared by shape: JSON type and format, enum values, nullability,
items and nested objects; titles, descriptions, defaults and bounds are the
API's business (it enforces them and answers with a problem). A field the
client reads as "its enum when known, else a string" has the enum's shape.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stint.client.models import (
    SCHEMAS,
    TERMINAL_KINDS,
    BusyStrategy,
    DeliveryStatus,
    EventKind,
    SessionStatus,
    TickOutcome,
    TurnStatus,
)
from stint.client.routes import ROUTES, Route
from stint.store.vocabulary import EventKind as StoreEventKind

SPEC: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text()
)
COMPONENTS: dict[str, Any] = SPEC["components"]["schemas"]

Shape = Any


def shape(schema: dict[str, Any], defs: dict[str, Any]) -> Shape:
    """A comparable reduction of a JSON schema (see the module's docstring)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return shape(defs[name], defs)
    if "enum" in schema:
        return ("enum", tuple(sorted(schema["enum"])))
    if "anyOf" in schema:
        options = {shape(option, defs) for option in schema["anyOf"]}
        enums = {o for o in options if isinstance(o, tuple) and o[0] == "enum"}
        if enums:
            options.discard(("string", None))  # "the enum when known, else a string"
        return frozenset(options) if len(options) > 1 else options.pop()
    kind = schema.get("type")
    if kind == "array":
        return ("array", shape(schema.get("items", {}), defs))
    if kind == "object" and "properties" in schema:
        return ("object", fields(schema, defs))
    if kind == "object":
        extra = schema.get("additionalProperties", True)
        return ("map", shape(extra, defs) if isinstance(extra, dict) else "any")
    if kind is None:
        return "any"  # {} or JsonValue: any JSON value
    return (kind, schema.get("format"))


def fields(schema: dict[str, Any], defs: dict[str, Any]) -> tuple[Any, ...]:
    required = set(schema.get("required", []))
    return tuple(
        sorted(
            (name, name in required, shape(prop, defs))
            for name, prop in schema["properties"].items()
        )
    )


def client_shape(model: type[BaseModel]) -> Shape:
    schema = model.model_json_schema(mode="validation")
    return ("object", fields(schema, schema.get("$defs", {})))


def spec_shape(component: str) -> Shape:
    return ("object", fields(COMPONENTS[component], COMPONENTS))


@pytest.mark.parametrize("component", sorted(SCHEMAS))
def test_each_model_has_the_shape_of_its_component(component: str) -> None:
    assert client_shape(SCHEMAS[component]) == spec_shape(component), (
        f"stint.client.models.{SCHEMAS[component].__name__} drifted from {component} "
        "in docs/openapi.json"
    )


@pytest.mark.parametrize(
    ("enum", "component"),
    [
        (SessionStatus, "SessionStatus"),
        (TurnStatus, "TurnStatus"),
        (EventKind, "EventKind"),
        (BusyStrategy, "BusyStrategy"),
        (TickOutcome, "TickOutcome"),
        (DeliveryStatus, "DeliveryStatus"),
    ],
)
def test_each_enum_knows_every_value_the_api_sends(enum: type[Any], component: str) -> None:
    assert sorted(e.value for e in enum) == sorted(COMPONENTS[component]["enum"]), component


def test_the_terminal_kinds_are_the_stores() -> None:
    assert {str(k) for k in TERMINAL_KINDS} == {str(k) for k in StoreEventKind if k.terminal}


def _operation(route: Route) -> dict[str, Any] | None:
    found: dict[str, Any] | None = SPEC["paths"].get(route.template, {}).get(route.method.lower())
    return found


def _ref(content: dict[str, Any]) -> str | None:
    schema = content.get("application/json", {}).get("schema", {})
    options = schema.get("anyOf", [schema])
    refs = [o["$ref"].rsplit("/", 1)[-1] for o in options if "$ref" in o]
    return refs[0] if refs else None


def _component_of(model: type[BaseModel]) -> str:
    """The component a model mirrors (its own name when SCHEMAS has none)."""
    return next((name for name, known in SCHEMAS.items() if known is model), model.__name__)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
def test_each_route_is_an_operation_of_the_spec(route: Route) -> None:
    operation = _operation(route)
    assert operation is not None, f"{route.method} {route.template} is not in docs/openapi.json"
    answers = operation["responses"]
    assert str(route.status) in answers, (route.name, sorted(answers))
    assert _ref(answers[str(route.status)].get("content", {})) == _component_of(route.result)
    body = operation.get("requestBody", {}).get("content", {})
    assert _ref(body) == (_component_of(route.body) if route.body else None), route.name
    parameters = {(p["in"], p["name"].lower()) for p in operation.get("parameters", [])}
    for name in route.query:
        assert ("query", name) in parameters, (route.name, name)
    for name in route.headers:
        assert ("header", name.lower()) in parameters, (route.name, name)


def test_the_client_calls_every_v1_operation() -> None:
    called = {(r.method, r.template) for r in ROUTES}
    offered = {
        (method.upper(), path)
        for path, operations in SPEC["paths"].items()
        if path.startswith("/v1/")
        for method in operations
    }
    assert offered - called == set(), "operations of the API the client does not call"
