"""Acceptance: ``stint quota`` as an operator uses it, and its figures in ``stint status``."""

from __future__ import annotations

import json

import pytest

from stint.store.pool import Pool
from tests.workers import Cluster, count_rows


async def test_set_show_list_and_delete_a_scope(cluster: Cluster) -> None:
    made = cluster.stint("quota", "set", "openai:main", "--rpm", "60", "--tpm", "20000")
    assert made.returncode == 0, made.stderr
    shown = json.loads(made.stdout)
    assert (shown["scope"], shown["rpm"], shown["tpm"], shown["concurrency"]) == (
        "openai:main",
        60,
        20000,
        None,
    )
    assert shown["created"] is True and shown["window_seconds"] == 60
    assert shown["tokens"] == dict.fromkeys(
        ("reserved", "reconciled", "refunded", "debt", "unknown", "in_flight"), 0
    )
    changed = cluster.stint("quota", "set", "openai:main", "--concurrency", "4", "--rpm", "none")
    assert json.loads(changed.stdout) | {"created": False} == json.loads(changed.stdout)
    assert (json.loads(changed.stdout)["rpm"], json.loads(changed.stdout)["tpm"]) == (None, 20000)
    cluster.stint("quota", "set", "b", "--window", "5")
    listed = cluster.stint("quota", "list")
    assert [json.loads(line)["scope"] for line in listed.stdout.splitlines()] == [
        "b",
        "openai:main",
    ]
    status = json.loads(cluster.stint("status", "--json").stdout)
    assert [q["scope"] for q in status["quotas"]] == ["b", "openai:main"]
    gone = cluster.stint("quota", "delete", "b")
    assert json.loads(gone.stdout) == {"scope": "b", "deleted": True}
    again = cluster.stint("quota", "show", "b")
    assert again.returncode == 2 and "no quota scope 'b'" in again.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["set", "bad scope", "--rpm", "5"], "quota scope must be"),
        (["set", "s", "--rpm", "0"], "--rpm must be between 1"),
        (["set", "s", "--tpm", "lots"], "--tpm must be a whole number"),
        (["set", "s", "--window", "0"], "--window must be between"),
        (["delete", "nothing-here"], "no quota scope"),
    ],
)
async def test_bad_quota_input_exits_2_with_one_line_and_writes_nothing(
    cluster: Cluster, pool: Pool, args: list[str], message: str
) -> None:
    result = cluster.stint("quota", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
    assert await count_rows(pool, "quota_scopes") == 0
