"""``pytest loadtest``: the workers x slots matrix runs only with ``--run-load``.

Without it every matrix case is skipped with a reason that says so, and the run
ends with ``load matrix: not run (pass --run-load)`` — a green generic test run
is never evidence that the matrix ran. ``STINT_REQUIRE_LOAD=1`` turns that skip
into a failure, for release pipelines.

``pytest loadtest --run-load`` alone runs the matrix (a few minutes), writes its
report and prints the sizing it gives. The long runs (the soaks, the ladder,
the scale and quota runs, the API case, the sizing validation) carry
``long_run(NAME)`` and run only when the command selects tests itself (``-k``,
``-m`` or a file): ``-k ladder``, ``-k sizing``; the end-of-run line names the
ones left out.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.config import Config
from _pytest.config.argparsing import Parser
from _pytest.nodes import Item
from _pytest.terminal import TerminalReporter

from stint.lab.interrupt import sigterm_as_interrupt
from stint.lab.load_run import LoadSession
from stint.lab.model import HARNESSES, CaseSpec

NOT_RUN = "load matrix: not run (pass --run-load)"
SUMMARY_ATTR = "_stint_load_summary"
LINES_ATTR = "_stint_load_lines"
LEFT_OUT_ATTR = "_stint_long_runs_left_out"
SKIP_REASON = (
    "load matrix not run: pass --run-load to run it (pytest loadtest --run-load); "
    "STINT_REQUIRE_LOAD=1 makes this a failure"
)
DEFAULT_MATRIX = [
    (1, 1, 24, 250),
    (1, 4, 24, 250),
    (2, 2, 24, 250),
    (2, 4, 24, 250),
    (2, 2, 16, 1000),
    # Beyond the seed's cells: many slots per worker, three waves each.
    (1, 16, 48, 250),
    (1, 64, 192, 250),
    (4, 16, 192, 250),
]
# The agents harness against the fake provider: (workers, slots, sessions).
DEFAULT_AGENT_MATRIX = [(1, 4, 24), (2, 4, 24)]


def pytest_addoption(parser: Parser) -> None:
    group = parser.getgroup("stint load", "Stint load matrix")
    group.addoption("--run-load", action="store_true", help="run the workers x slots matrix")
    group.addoption(
        "--matrix",
        default=None,
        metavar="WxS,...",
        help="cells to run, e.g. 1x1,2x4 (default: the seed's five cells and 1x16, 1x64, 4x16)",
    )
    group.addoption("--reps", type=int, default=2, metavar="N", help="repetitions (2)")
    group.addoption(
        "--sessions",
        type=int,
        default=None,
        metavar="N",
        help="sessions per case (24; 16 for the 1000 ms cell)",
    )
    group.addoption(
        "--tool-wait-ms",
        type=int,
        default=None,
        metavar="N",
        help="scripted tool wait (250; 1000 for the last default cell)",
    )
    group.addoption(
        "--harness",
        choices=("all", *HARNESSES),
        default="all",
        help="which harness's cases to run: the scripted fixture, stint.agents:chat against "
        "the fake provider (ids start with agents-; -k agents also selects them), or all",
    )
    group.addoption(
        "--model-latency-ms",
        type=int,
        default=250,
        metavar="N",
        help="agents cases: the fake provider's wait before each first token (250)",
    )
    group.addoption(
        "--keep-cases",
        action="store_true",
        help="build matrix.json/md from this run's cases plus those already in "
        "REPORT_DIR/cases that it did not rerun (e.g. add the agents cases to a matrix)",
    )
    group.addoption(
        "--report-dir",
        default="report/load",
        metavar="DIR",
        help="where the case JSON, matrix.json/md and charts go (report/load); the sizing "
        "validation's sizing.json/md too",
    )
    group.addoption(
        "--size-report",
        default="docs/load/matrix.json",
        metavar="FILE",
        help="-k sizing: the matrix.json stint size reads (docs/load/matrix.json)",
    )
    group.addoption(
        "--size-rate",
        type=float,
        default=5.0,
        metavar="R",
        help="-k sizing: turns arriving per second, as stated to stint size (5)",
    )
    group.addoption(
        "--size-turn-seconds",
        type=float,
        default=20.0,
        metavar="T",
        help="-k sizing: seconds a turn is active, as stated to stint size (20)",
    )
    group.addoption(
        "--time-scale",
        type=float,
        default=10.0,
        metavar="F",
        help="-k sizing: run turns F times shorter arriving F times faster (10: 20 s turns "
        "as 2 s at 10x the rate; the busy slots stay the same)",
    )
    group.addoption(
        "--size-seconds",
        type=float,
        default=60.0,
        metavar="S",
        help="-k sizing: seconds of arrivals per configuration, in the run's time (60)",
    )


def matrix_cases(config: Config) -> list[CaseSpec]:
    """The cases the options ask for, in run order."""
    sessions = config.getoption("--sessions")
    wait = config.getoption("--tool-wait-ms")
    matrix = config.getoption("--matrix")
    if matrix:
        cells = []
        for cell in str(matrix).split(","):
            workers, _, slots = cell.strip().partition("x")
            cells.append((int(workers), int(slots), sessions or 24, wait or 250))
    else:
        cells = [(w, s, sessions or n, wait or ms) for w, s, n, ms in DEFAULT_MATRIX]
    reps = int(config.getoption("--reps"))
    harness = str(config.getoption("--harness"))
    cases: list[CaseSpec] = []
    if harness in ("all", "scripted"):
        cases += [CaseSpec(w, s, n, ms, rep) for w, s, n, ms in cells for rep in range(1, reps + 1)]
    if harness in ("all", "agents"):
        latency = int(config.getoption("--model-latency-ms"))
        agent_cells = (
            [(w, s, n) for w, s, n, _ in cells]
            if matrix
            else [(w, s, sessions or n) for w, s, n in DEFAULT_AGENT_MATRIX]
        )
        cases += [
            CaseSpec(w, s, n, 0, rep, harness="agents", model_latency_ms=latency)
            for w, s, n in agent_cells
            for rep in range(1, reps + 1)
        ]
    return cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case_spec" in metafunc.fixturenames:
        cases = matrix_cases(metafunc.config)
        metafunc.parametrize("case_spec", cases, ids=[c.label for c in cases])


_LOAD_TIMEOUT_S = 4 * 3600  # the longest soak runs for about an hour here


def _selects_itself(config: Config) -> bool:
    """The command chose its tests (``-k``, ``-m``, a file or a test id), so it gets
    what it chose, long runs included."""
    if config.getoption("keyword") or config.getoption("markexpr"):
        return True
    return any(arg.endswith(".py") or "::" in arg for arg in config.args)


def pytest_collection_modifyitems(config: Config, items: list[Item]) -> None:
    """Load cases run for minutes (soaks for an hour): a timeout of their own
    instead of the suite's per-test default. With ``--run-load`` and no selection of
    its own, the long runs are left out (and named at the end)."""
    for item in items:
        if item.get_closest_marker("load") is not None and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(_LOAD_TIMEOUT_S))
    if not config.getoption("--run-load") or _selects_itself(config):
        return
    marks = {item: item.get_closest_marker("long_run") for item in items}
    long = [item for item, mark in marks.items() if mark is not None]
    if not long:
        return
    names = {str(mark.args[0]) for mark in marks.values() if mark is not None}
    config.hook.pytest_deselected(items=long)
    items[:] = [item for item in items if marks[item] is None]
    setattr(config, LEFT_OUT_ATTR, sorted(names))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: Item) -> None:
    """Before any fixture starts a database: skip (or fail) unless --run-load."""
    if item.get_closest_marker("load") is None or item.config.getoption("--run-load"):
        return
    if os.environ.get("STINT_REQUIRE_LOAD") == "1":
        pytest.fail("STINT_REQUIRE_LOAD=1 but the load matrix was not run: pass --run-load")
    pytest.skip(SKIP_REASON)


def pytest_configure(config: Config) -> None:
    config.addinivalue_line("markers", "load: part of the load matrix (needs --run-load)")
    config.addinivalue_line(
        "markers",
        "long_run(name): a load run beyond the matrix, run when selected (-k name)",
    )
    sigterm_as_interrupt()  # a killed load run still stops its workers and clusters


def pytest_terminal_summary(terminalreporter: TerminalReporter, config: Config) -> None:
    """The run's last word on the matrix: where its report is and what it sizes, or
    that it did not run; and which long runs were left out."""
    ran = getattr(config, SUMMARY_ATTR, None)
    if ran:
        for line in ran.splitlines():
            terminalreporter.write_line(line)
    elif config.getoption("--run-load"):
        terminalreporter.write_line("load matrix: not run (no matrix case selected)")
    else:
        terminalreporter.write_line(NOT_RUN)
    for line in getattr(config, LINES_ATTR, []):
        terminalreporter.write_line(line)
    left_out = getattr(config, LEFT_OUT_ATTR, None)
    if left_out:
        terminalreporter.write_line(
            f"long runs not selected: {', '.join(left_out)} "
            f"(run one with -k NAME, e.g. pytest loadtest --run-load -k {left_out[0]})"
        )


@pytest.fixture(scope="session")
def load_session(request: pytest.FixtureRequest) -> Iterator[LoadSession]:
    """Runs the cases one after another and writes the matrix report at the end."""
    config = request.config
    command = shlex.join(["pytest", *config.invocation_params.args])
    session = LoadSession(
        Path(str(config.getoption("--report-dir"))).resolve(),
        command=command,
        planned=len(matrix_cases(config)),
        keep_cases=bool(config.getoption("--keep-cases")),
    )
    try:
        yield session
    finally:
        setattr(config, SUMMARY_ATTR, session.finish())


@pytest.fixture(scope="session")
def load_report_lines(request: pytest.FixtureRequest) -> list[str]:
    """Lines a long run adds to the end of the run (its verdict, where its report is)."""
    lines: list[str] = []
    setattr(request.config, LINES_ATTR, lines)
    return lines
