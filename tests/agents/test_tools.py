"""The tool registry: schemas from type hints, argument checks, registration rules."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from stint.agents.errors import ToolArgumentsError
from stint.agents.tools import ToolRegistry


def _registry() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool
    async def forecast(
        city: Annotated[str, Field(description="where")],
        days: int = 1,
        unit: Literal["c", "f"] = "c",
    ) -> dict[str, object]:
        """Weather for a city.

        Longer text that the model does not need.
        """
        return {"city": city, "days": days, "unit": unit}

    @tools.tool(name="ship", needs_approval=True)
    async def ship_it(service: str) -> str:
        """Ship a service."""
        return service

    class Note(BaseModel):
        text: str

    tools.journal("note", Note, description="Remember something.")
    return tools


def test_schema_comes_from_type_hints_and_the_docstring() -> None:
    schema = _registry().get("forecast")
    assert schema is not None
    function = schema.schema()["function"]
    assert function["name"] == "forecast"
    assert function["description"] == "Weather for a city."
    parameters = function["parameters"]
    assert parameters["required"] == ["city"]
    assert parameters["properties"]["city"]["description"] == "where"
    assert parameters["properties"]["days"]["type"] == "integer"
    assert parameters["properties"]["unit"]["enum"] == ["c", "f"]
    assert parameters["additionalProperties"] is False


def test_registration_order_names_and_flags() -> None:
    tools = _registry()
    assert [t.name for t in tools] == ["forecast", "ship", "note"]
    ship = tools.get("ship")
    assert ship is not None and ship.needs_approval
    assert [s["function"]["name"] for s in tools.schemas()] == ["forecast", "ship", "note"]


def test_arguments_are_validated_and_normalised() -> None:
    tool = _registry().get("forecast")
    assert tool is not None
    assert tool.parse('{"city": "Oslo", "days": "3"}') == {"city": "Oslo", "days": 3, "unit": "c"}
    with pytest.raises(ToolArgumentsError, match="not JSON"):
        tool.parse('{"city": "Oslo"')
    with pytest.raises(ToolArgumentsError, match="must be a JSON object"):
        tool.parse("[1, 2]")
    with pytest.raises(ToolArgumentsError, match="city: Field required"):
        tool.parse("{}")
    with pytest.raises(ToolArgumentsError, match="colour: Extra inputs"):
        tool.parse('{"city": "Oslo", "colour": "blue"}')


def test_bad_registrations_are_refused() -> None:
    tools = _registry()

    async def forecast() -> None:
        return None

    with pytest.raises(ValueError, match="already registered"):
        tools.tool(forecast)

    def not_async(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="async"):
        tools.tool(not_async)  # type: ignore[arg-type]  # deliberately not async

    async def spaced() -> None:
        return None

    with pytest.raises(ValueError, match="letters, digits"):
        tools.tool(name="two words")(spaced)
