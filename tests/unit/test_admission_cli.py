"""``stint admission set`` reads its values and target row before touching the database."""

from __future__ import annotations

import pytest

from stint.ops.admission import parse_limit
from stint.ops.cli import build_parser
from stint.ops.inputs import UsageError


@pytest.mark.parametrize(
    ("text", "value"), [("1", 1), (" 250 ", 250), ("none", None), ("NONE", None)]
)
def test_a_limit_is_a_positive_whole_number_or_none(text: str, value: int | None) -> None:
    assert parse_limit("--max-queued", text) == value


@pytest.mark.parametrize("text", ["0", "-1", "2147483648", "1.5", "", "ten"])
def test_anything_else_is_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(UsageError, match="--max-queued must be"):
        parse_limit("--max-queued", text)


def test_tenant_and_default_are_exclusive() -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(
            ["admission", "set", "--tenant", "a", "--default", "--max-queued", "1"]
        )
    assert exited.value.code == 2
