"""Acceptance: bad input gets one clear line, exit 2, and nothing written.

Real processes with real argv and stdin bytes for the cases the issue names;
then a property test (hypothesis) that runs ``stint enqueue`` and ``stint
answer`` in-process on arbitrary JSON and arbitrary bytes and asserts: exit
code 0, 2 or 3; no traceback; rows written only when the exit code is 0.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from psycopg import sql

from stint.ops import cli
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from stint.store.worker_store import SqlWorkerStore
from tests.integration.claims import claim_one
from tests.workers import Cluster

_TABLES = ("sessions", "turns", "events", "steps")


def _rows(db: ScratchTarget) -> dict[str, int]:
    """Row counts of every table a CLI command could write (a sync read)."""
    with psycopg.connect(db.conninfo, autocommit=True) as conn:
        counts = {}
        for table in _TABLES:
            statement = sql.SQL("SELECT count(*) FROM {}.{}").format(
                sql.Identifier(db.config.schema), sql.Identifier(table)
            )
            row = conn.execute(statement).fetchone()
            assert row is not None
            counts[table] = int(row[0])
        return counts


def _stint(
    cluster: Cluster, *args: str | bytes, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "stint.ops.cli", *args],
        env={**os.environ, **cluster.env},
        input=stdin,
        capture_output=True,
        timeout=60,
    )


def _nest(depth: int) -> str:
    return '{"a": ' + "[" * depth + "]" * depth + "}"


ENQUEUE_CASES: dict[str, tuple[list[str | bytes], bytes | None, str]] = {
    "nesting-5000": ([_nest(5000)], None, "nests 5001 levels deep"),
    "nesting-over-the-limit": ([_nest(65)], None, "deeper than the limit 64"),
    "invalid-utf8-argv": ([b'{"a": "\xff\xfe"}'], None, "not valid UTF-8"),
    "invalid-utf8-stdin": (["-"], b'{"a": "\xff"}', "standard input is not valid UTF-8"),
    "nul-escape": (['{"a": "x\\u0000y"}'], None, "\\u0000"),
    "nul-in-a-key": (['{"\\u0000": 1}'], None, "\\u0000"),
    "lone-surrogate": (['{"a": "\\ud800"}'], None, "lone surrogate"),
    "nan": (['{"a": NaN}'], None, "NaN is not a JSON number"),
    "infinity": (['{"a": Infinity}'], None, "Infinity is not a JSON number"),
    "minus-infinity": (['{"a": [-Infinity]}'], None, "-Infinity is not a JSON number"),
    "float-overflow": (['{"a": 1e400}'], None, "out of range"),
    "huge-integer": (['{"a": 1' + "0" * 5000 + "}"], None, "not valid JSON"),
    "timeout-negative": (["--timeout", "-5", "{}"], None, "--timeout must be between"),
    "timeout-huge": (["--timeout", "1e300", "{}"], None, "--timeout must be between"),
    "timeout-nan": (["--timeout", "nan", "{}"], None, "--timeout must be between"),
    "timeout-inf": (["--timeout", "inf", "{}"], None, "--timeout must be between"),
    "timeout-zero": (["--timeout", "0", "{}"], None, "--timeout must be between"),
    "timeout-word": (["--timeout", "soon", "{}"], None, "must be a number of seconds"),
    "key-too-long": (["--idempotency-key", "k" * 300, "{}"], None, "1..200 printable ASCII"),
    "key-invalid-utf8": (["--idempotency-key", b"k\xff", "{}"], None, "not valid UTF-8"),
    "empty-tenant": (["--tenant", "", "{}"], None, "tenant must be 1..100 characters"),
    "unknown-flag": (["--nope", "{}"], None, "unrecognized arguments"),
}


@pytest.mark.parametrize("case", sorted(ENQUEUE_CASES))
async def test_bad_enqueue_input_is_one_line_exit_2_and_nothing_written(
    cluster: Cluster, db: ScratchTarget, case: str
) -> None:
    args, stdin, message = ENQUEUE_CASES[case]
    before = _rows(db)
    result = _stint(cluster, "enqueue", *args, stdin=stdin)
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr
    [line] = stderr.strip().splitlines()
    assert message in line
    assert result.stdout == b""
    assert _rows(db) == before


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("NaN", "NaN is not a JSON number"),
        ('"\\u0000"', "\\u0000"),
        ('["\\udfff"]', "lone surrogate"),
        ("[" * 3000 + "]" * 3000, "nests 3000 levels deep"),
        (b'"\xc3("', "not valid UTF-8"),
    ],
)
async def test_bad_answers_are_one_line_exit_2_and_nothing_written(
    cluster: Cluster, db: ScratchTarget, answer: str | bytes, message: str
) -> None:
    session = "00000000-0000-0000-0000-000000000000"
    before = _rows(db)
    result = _stint(cluster, "answer", session, "step", answer)
    stderr = result.stderr.decode()
    assert result.returncode == 2
    [line] = stderr.strip().splitlines()
    assert message in line
    assert _rows(db) == before


# ----------------------------------------------------------------- the property test


@dataclass(frozen=True)
class Question:
    session_id: UUID
    step_key: str


@pytest.fixture
async def question(db: ScratchTarget, pool: Pool) -> Question:
    """A turn parked on a question, through the worker's own store calls."""
    client = ClientStore(db.config, pool)
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    queued = await client.turns_enqueue(session_id=None, idempotency_key="q", turn_input={})
    claim, turn = await claim_one(runtime, "w")
    step_key = "ask-property"
    parked = await runtime.turns_park(
        claim, turn_id=turn.turn_id, step_key=step_key, digest="d", question="?"
    )
    assert parked is None
    return Question(queued.session_id, step_key)


@pytest.fixture
def in_process(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``stint.ops.cli.main`` runs in this process against the test's database."""
    for name, value in cluster.env.items():
        monkeypatch.setenv(name, value)
    yield


JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(exclude_categories=()), max_size=12)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=()), max_size=6), inner, max_size=4
        )
    ),
    max_leaves=12,
)


def _json_text(value: Any) -> str:
    return json.dumps(value, allow_nan=True)


# What a user can type: JSON (with NaN, surrogates, \u0000 among the leaves),
# deep nests, and arbitrary bytes (argv hands undecodable bytes over as surrogates).
PAYLOADS = (
    JSON_VALUES.map(lambda v: ("text", _json_text(v).encode("utf-8", "surrogatepass")))
    | st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4).map(
        lambda v: ("text", _json_text(v).encode("utf-8", "surrogatepass"))
    )
    | st.integers(1, 3000).map(lambda n: ("text", ("[" * n + "]" * n).encode()))
    | st.binary(max_size=64).map(lambda b: ("bytes", b))
)


def _run_main(argv: list[str], stdin: bytes, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    old_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own refusal
        code = int(exc.code or 0)
    finally:
        sys.stdin = old_stdin
    captured = capsys.readouterr()
    return code, captured.err


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    payload=PAYLOADS,
    command=st.sampled_from(["enqueue", "answer"]),
    via_stdin=st.booleans(),
)
async def test_any_input_exits_0_2_or_3_without_a_traceback_and_writes_only_on_0(
    in_process: None,
    db: ScratchTarget,
    question: Question,
    capsys: pytest.CaptureFixture[str],
    payload: tuple[str, bytes],
    command: str,
    via_stdin: bool,
) -> None:
    _, data = payload
    # On a real command line, undecodable bytes arrive as lone surrogates.
    as_arg = os.fsdecode(data)
    value = "-" if via_stdin else as_arg
    if command == "enqueue":
        argv = ["enqueue", "--", value]
    else:
        argv = ["answer", str(question.session_id), question.step_key, "--", value]
    before = _rows(db)
    # main() runs its own event loop, so it runs in a thread beside the test's loop.
    code, err = await asyncio.to_thread(_run_main, argv, data if via_stdin else b"", capsys)
    after = _rows(db)
    event(f"{command} exit {code}")
    assert code in (0, 2, 3), err
    assert "Traceback" not in err
    if code != 0:
        assert after == before, err
        assert len(err.strip().splitlines()) == 1, err
