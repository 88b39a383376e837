"""The README documents what the code does: every command's exit codes, every JSON
output's fields, every setting, and the scripted harness's inputs. Each list here
is read from the code, so a new field or command fails this test until documented."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import pytest

from stint.config.settings import Settings, env_name
from stint.ops.admission import admission_json
from stint.ops.checks import Check, CheckReport
from stint.ops.cli import build_parser
from stint.ops.quota_cli import quota_json
from stint.ops.show import session_json, turn_json, turn_of_session_json
from stint.ops.sizing import Sizing
from stint.ops.status import status_json
from stint.store.admission import LimitsRow
from stint.store.controls import AnswerResult, ControlResult
from stint.store.models import EnqueueResult, Event, QuotaScope, StatusSummary, WorkerRow
from stint.store.usage import SessionUsage, TurnUsage
from stint.store.vocabulary import EventKind, TurnStatus, WorkerState
from stint.telemetry import names
from stint.worker.pruner import PruneReport

README = (Path(__file__).parents[2] / "README.md").read_text()
NOW = datetime.now(UTC)


def _table(heading: str) -> dict[str, str]:
    """The two-column table under ``### heading``: first cell -> second cell."""
    section = README.split(f"### {heading}\n", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("|") and len(cells) >= 2 and not cells[0].startswith("---"):
            rows[cells[0]] = cells[1]
    return rows


def _fields(cell: str) -> set[str]:
    """Backticked names at the start of each comma-separated item (not in parentheses)."""
    return set(re.findall(r"(?:^|, )`([a-z_]+)`", re.sub(r"\([^)]*\)", "", cell)))


def _subcommands() -> list[str]:
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(actions[0].choices)


def test_every_command_has_its_exit_codes_documented() -> None:
    documented = _table("Exit codes")
    for command in _subcommands():
        assert f"`stint {command}`" in documented, command
    assert "`worker`" in documented


def _worker() -> WorkerRow:
    return WorkerRow("w", WorkerState.RUNNING, 1, 1, "h", "v", [], 0.1, True, 0)


def _turn() -> TurnUsage:
    return TurnUsage(
        uuid4(),
        1,
        TurnStatus.SUCCEEDED,
        None,
        1,
        "w",
        {},
        None,
        NOW,
        NOW,
        NOW,
        0,
        None,
        None,
        None,
        None,
    )


def _session() -> SessionUsage:
    return SessionUsage(uuid4(), "idle", 3, [_turn()])


def _status() -> StatusSummary:
    return StatusSummary([_worker()], {}, 0, 0, 0, None, 1, 0, 0)


_LIMITS = LimitsRow("*", None, None, 16, None, 0, 0)
_ADMISSION = admission_json([_LIMITS], 0)


OUTPUTS = {
    "`stint prune`": PruneReport().as_json(),
    "`stint enqueue`": EnqueueResult(uuid4(), uuid4(), 1, True).as_json(),
    "`stint cancel`, `stint interrupt`": ControlResult(uuid4()).as_json(),
    "`stint answer`": AnswerResult(uuid4(), uuid4(), "k", True).as_json(),
    "`stint tail` (one line per event)": Event(
        uuid4(), 1, EventKind.TURN_STARTED, None, {}, NOW
    ).as_json(),
    "`stint show`": session_json(_session()),
    "`stint show --turn`": turn_of_session_json(_session(), _turn()),
    "`stint show`: `turns[]`, `turn`": turn_json(_turn()),
    "`stint show`: `usage`, `session_usage`, `turns[].usage`": _turn().usage(),
    "`stint status --json`": status_json(_status(), _ADMISSION),
    "`stint status --json`: `workers[]`": status_json(_status(), _ADMISSION)["workers"][0],
    "`stint quota show`, `stint quota list` (one line per scope)": quota_json(
        QuotaScope("s", None, None, None, 60.0, *([0] * 13))
    ),
    "`stint admission show`, `status --json`: `admission`": _ADMISSION,
    "`stint admission show`: `global_backlog`": _ADMISSION["global_backlog"],
    "`stint admission show`: `tenants[]`": _LIMITS.as_json(),
    "`stint admission show`: `tenants[].limits`": _LIMITS.as_json()["limits"],
    "`stint admission show`: `tenants[].usage`": _LIMITS.as_json()["usage"],
    "`stint check --json`": CheckReport([Check("c", True, {})]).as_json(),
    "`stint check --json`: `checks[]`": CheckReport([Check("c", True, {})]).as_json()["checks"][0],
    "`stint size --json`": {f.name: None for f in fields(Sizing)},
}


@pytest.mark.parametrize("output", sorted(OUTPUTS))
def test_every_json_output_has_its_fields_documented(output: str) -> None:
    documented = _table("JSON outputs")
    assert output in documented, output
    assert _fields(documented[output]) == set(OUTPUTS[output]), output


def test_every_setting_is_in_the_configuration_table() -> None:
    for name in Settings.model_fields:
        assert f"| `{env_name(name)}` |" in README, env_name(name)


def test_the_configuration_table_is_one_table() -> None:
    # A blank line inside it makes every row after it render as a paragraph.
    lines = README.splitlines()
    rows = [i for i, line in enumerate(lines) if line.startswith("| `STINT_")]
    assert rows and all(lines[i].startswith("|") for i in range(rows[0], rows[-1] + 1))


def test_every_metric_is_in_the_metrics_table() -> None:
    section = README.split("### Metrics (Prometheus)\n", 1)[1].split("\n#", 1)[0]
    documented = set(re.findall(r"`(stint_[a-z_]+)`", section))
    emitted = {value for key, value in vars(names).items() if key.isupper()}
    assert {n for n in emitted if n.startswith("stint_")} == documented


def test_the_scripted_harness_inputs_are_documented() -> None:
    documented = _table("The scripted harness")
    assert set(documented) >= {"`min_wait_ms`", "`gate`", "`ask`"}
