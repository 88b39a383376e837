"""docs/reference/ is what ``make reference`` draws from the code, exactly; and the
data it draws from covers the code: every command has its exit codes (also in its
``--help``), every metric its type and labels as exported, every event kind its
payload fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from stint.lab import reference
from stint.ops import exit_codes
from stint.ops.cli import build_parser
from stint.store.vocabulary import EVENTS, EventKind
from stint.telemetry import metrics, names
from stint.worker import main as worker_main

ROOT = Path(__file__).parents[2]
PAGES = reference.render(ROOT)


@pytest.mark.parametrize("page", sorted(str(p) for p in PAGES))
def test_the_committed_reference_is_what_the_code_generates(page: str) -> None:
    committed = ROOT / page
    assert committed.exists(), f"{page} is missing: run make reference"
    assert committed.read_text() == PAGES[Path(page)], f"{page} is stale: run make reference"


def test_every_generated_page_says_it_is_generated_on_its_first_line() -> None:
    for page, text in PAGES.items():
        first = text.split("\n")[0]
        assert first.startswith("_Generated from ") and "make reference" in first, page
    # docs/reference/sql holds each statement's expanded text (make sql-reference,
    # checked by tests/unit/test_expanded_sql.py).
    pages = {p.name for p in (ROOT / "docs/reference").iterdir() if p.is_file()}
    assert pages == {p.name for p in PAGES}


def _commands() -> dict[str, object]:
    return {name: sub for name, _, sub in reference._subparsers(build_parser())}


def test_every_stint_command_has_its_exit_codes_and_its_help_shows_them() -> None:
    commands = _commands()
    assert set(commands) == set(exit_codes.COMMANDS)
    for name, parser in commands.items():
        text = parser.format_help()  # type: ignore[attr-defined]
        assert "exit codes:" in text, name
        for code, _ in exit_codes.COMMANDS[name]:
            assert f"\n  {code} " in text, (name, code)
    assert "exit codes of every command:" in build_parser().format_help()
    worker_help = worker_main.build_parser().format_help()
    for code, _ in worker_main.EXIT_CODES:
        assert f"\n  {code} " in worker_help


def test_every_json_output_belongs_to_a_command_and_notes_only_its_fields() -> None:
    outputs = reference.json_outputs()
    for output in outputs:
        assert set(output.commands) <= set(_commands()), output.title
        assert set(output.notes) <= set(output.sample), output.title


def _exported() -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (type, labels) of every family the worker's and the API's registries
    export, with the elected sampler's figures and a quota scope present."""
    one = {"requests": 1}
    books = metrics.QuotaBooks("s", {"reserved": 1}, {"reserved": 1}, one, one, 0)
    queue = metrics.QueueFigures(0, 0, 0, 0, 0, 1.0, 1, 1, 0, quotas=[books])
    pool = metrics.PoolFigures(1, 1, 0, 0, 0, 0.0)
    state = metrics.WorkerState(1, 0, 0, 0, 0, 0, True, pool, queue)
    worker = metrics.WorkerMetrics(version="v", state=lambda: state)
    api = metrics.ApiMetrics(lambda: metrics.ApiState(0, 0, 0))
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for registry in (worker.registry, api.registry):
        for family in registry.collect():
            found[family.sample_name] = (family.kind, family.label_names)
    return found


def test_every_metric_is_described_with_the_type_and_labels_it_is_exported_with() -> None:
    emitted = {v for k, v in vars(names).items() if k.isupper() and str(v).startswith("stint_")}
    described = {m.name: (m.type, m.labels) for m in names.METRICS}
    assert set(described) == emitted
    exported = _exported()
    assert set(exported) == emitted
    for name, (kind, labels) in described.items():
        assert exported[name][0] == kind, name
        assert set(exported[name][1]) == set(labels), name


def test_every_event_kind_has_its_payload_fields() -> None:
    assert set(EVENTS) == set(EventKind)
    assert all(doc.payload and doc.what for doc in EVENTS.values())
