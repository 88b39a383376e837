"""What a setting is (its bounds, pattern, variable and meaning) and how a value
given as text or as a flag's value becomes one.

Settings used to be a pydantic-settings model. A worker needs nothing else from
pydantic, and importing it (with pydantic-settings and the model's schema) cost
every worker about 10 MiB of resident memory (docs/benchmarks.md section 11), so
the few rules Stint's settings use live here: integers, numbers, booleans,
text (optionally matching a pattern), paths, comma-separated lists and secrets.
The messages keep pydantic's wording, which operators' runbooks may quote.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from stint.errors import StintError

__all__ = [
    "FieldSpec",
    "Secret",
    "ValueRejected",
    "convert",
    "setting",
    "setting_list",
]

_SPEC: Final = "stint.setting"
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


class ValueRejected(StintError, ValueError):
    """A value a setting does not accept; the message says why (no variable, no value).
    Settings turns it into a ``SettingsError`` naming the variable."""


class Secret:
    """A value no repr, log line or traceback shows; ``get_secret_value`` unwraps it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')" if self._value else "Secret('')"

    def __str__(self) -> str:
        return "**********" if self._value else ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class FieldSpec:
    """A setting's rules and meaning, kept in its dataclass field's metadata."""

    description: str
    ge: float | None = None
    le: float | None = None
    pattern: str | None = None
    env: str | None = None  # the variable, when it is not STINT_ + the upper-cased name


def setting(
    default: Any,
    *,
    description: str,
    ge: float | None = None,
    le: float | None = None,
    pattern: str | None = None,
    env: str | None = None,
) -> Any:
    """A Settings field: its default and its rules (typed ``Any`` so a dataclass field
    of any type takes it, as with ``dataclasses.field``)."""
    spec = FieldSpec(description, ge=ge, le=le, pattern=pattern, env=env)
    return dataclasses.field(default=default, metadata={_SPEC: spec})


def setting_list(*, description: str) -> Any:
    """A comma-separated Settings field whose default is the empty list."""
    return dataclasses.field(default_factory=list, metadata={_SPEC: FieldSpec(description)})


def spec_of(field: dataclasses.Field[Any]) -> FieldSpec:
    spec = field.metadata.get(_SPEC)
    if not isinstance(spec, FieldSpec):
        raise TypeError(f"{field.name} is not declared with setting()")
    return spec


def convert(kind: object, value: Any, spec: FieldSpec) -> Any:
    """``value`` (text from the environment, or a flag's typed value) as ``kind``,
    within the spec's bounds and pattern; ``ValueRejected`` says what is wrong."""
    if kind is bool:
        return _boolean(value)
    if kind is int:
        return _bounded(_integer(value), spec)
    if kind is float:
        return _bounded(_number(value), spec)
    if kind is str:
        return _text(value, spec)
    if kind is Secret:
        return value if isinstance(value, Secret) else Secret(_text(value, spec))
    if kind == Path | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not isinstance(value, str | Path):
            raise ValueRejected("Input should be a valid path")
        return Path(value)
    if kind == list[str]:
        return _items(value)
    raise TypeError(f"no conversion to {kind!r}")


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise ValueRejected("Input should be a valid boolean, unable to interpret input")


def _integer(value: Any) -> int:
    """An int, or text or a number that is one ("8", "8.0", 8.0); not 2.5."""
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        with contextlib.suppress(ValueError):
            value = float(text)
    if isinstance(value, float) and math.isfinite(value):
        if value.is_integer():
            return int(value)
        raise ValueRejected("Input should be a valid integer, got a number with a fractional part")
    raise ValueRejected("Input should be a valid integer, unable to parse string as an integer")


def _number(value: Any) -> float:
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ValueRejected(
                "Input should be a valid number, unable to parse string as a number"
            ) from None
    else:
        raise ValueRejected("Input should be a valid number")
    if not math.isfinite(number):
        raise ValueRejected("Input should be a finite number")
    return number


def _bounded(number: float, spec: FieldSpec) -> Any:
    if spec.ge is not None and number < spec.ge:
        raise ValueRejected(f"Input should be greater than or equal to {spec.ge:g}")
    if spec.le is not None and number > spec.le:
        raise ValueRejected(f"Input should be less than or equal to {spec.le:g}")
    return number


def _text(value: Any, spec: FieldSpec) -> str:
    if not isinstance(value, str):
        raise ValueRejected("Input should be a valid string")
    if spec.pattern is not None and re.search(spec.pattern, value) is None:
        raise ValueRejected(f"String should match pattern '{spec.pattern}'")
    return value


def _items(value: Any) -> list[str]:
    """A comma-separated list (blank items dropped), or a list given as one."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return list(value)
    raise ValueRejected("Input should be a comma-separated list")
