"""``stint schedule`` and ``stint webhook`` as real processes: bad input is one clear
line on stderr, exit 2, nothing written; good input round-trips as JSON."""

from __future__ import annotations

import base64
import json
import os

import pytest

from stint.store.pool import Pool
from tests.workers import Cluster, count_rows

WEBHOOK_KEY = base64.b64encode(os.urandom(32)).decode()
TABLES = ("schedules", "webhook_endpoints", "sessions", "turns")


async def _counts(pool: Pool) -> dict[str, int]:
    return {table: await count_rows(pool, table) for table in TABLES}


BAD = [
    (["schedule", "create", "n", "{}", "--cron", "61 * * * *"], "bad cron expression"),
    (["schedule", "create", "n", "{}", "--cron", "* *"], "Wrong number of fields"),
    (["schedule", "create", "n", "{}", "--every", "5", "--timezone", "Nope/Zone"], "timezone"),
    (["schedule", "create", "n", "{}", "--every", "0"], "--every must be between"),
    (["schedule", "create", "n", "{}", "--every", "x"], "--every must be a number"),
    (["schedule", "create", "n", "[]", "--every", "5"], "must be a JSON object"),
    (["schedule", "create", "n n", "{}", "--every", "5"], "name must be"),
    (["schedule", "create", "n", "{}", "--every", "5", "--catch-up", "-1"], "--catch-up"),
    (["schedule", "create", "n", "{}", "--every", "5", "--cron", "* * * * *"], "not allowed"),
    (["schedule", "create", "n", "{}", "--every", "5", "--session", "nope"], "session id"),
    (
        ["schedule", "create", "n", "{}", "--every", "5", "--session",
         "00000000-0000-0000-0000-000000000001"],
        "No session with this id",
    ),
    (["schedule", "pause", "00000000-0000-0000-0000-000000000001"], "No schedule"),
    (["schedule", "delete", "x"], "not a schedule id"),
    (["webhook", "create", "--tenant", "a", "--url", "ftp://x.example/y", "--event",
      "turn.completed"], "http:// or https://"),
    (["webhook", "create", "--tenant", "a", "--url", "https://x.example/y", "--event",
      "turn.done"], "unknown event kind"),
    (["webhook", "delete", "00000000-0000-0000-0000-000000000001"], "No webhook endpoint"),
    (["webhook", "deliveries", "00000000-0000-0000-0000-000000000001"], "No webhook endpoint"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "says"), BAD)
async def test_bad_input_is_one_line_exit_2_nothing_written(
    cluster: Cluster, pool: Pool, args: list[str], says: str
) -> None:
    before = await _counts(pool)
    done = cluster.stint(*args, STINT_WEBHOOK_KEY=WEBHOOK_KEY)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert says in done.stderr and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stdout == ""
    assert await _counts(pool) == before


async def test_a_webhook_needs_the_key_and_shows_its_secret_once(
    cluster: Cluster, pool: Pool
) -> None:
    args = ["webhook", "create", "--tenant", "acme", "--url", "https://x.example/h", "--event",
            "turn.completed", "--event", "approval.requested"]  # fmt: skip
    without = cluster.stint(*args)
    assert without.returncode == 2 and "STINT_WEBHOOK_KEY" in without.stderr
    assert await count_rows(pool, "webhook_endpoints") == 0
    made = cluster.stint(*args, STINT_WEBHOOK_KEY=WEBHOOK_KEY)
    assert made.returncode == 0, made.stderr
    shown = json.loads(made.stdout)
    assert shown["events"] == ["turn.completed", "approval.requested"] and shown["enabled"]
    listed = cluster.stint("webhook", "list", "--tenant", "acme")
    assert listed.returncode == 0 and shown["secret"] not in listed.stdout
    assert json.loads(listed.stdout)["webhook_id"] == shown["webhook_id"]


async def test_a_schedule_round_trips(cluster: Cluster, pool: Pool) -> None:
    made = cluster.stint(
        "schedule", "create", "daily", '{"n": 1}', "--cron", "30 9 * * 1-5",
        "--timezone", "America/New_York", "--tenant", "acme", "--catch-up", "2",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    shown = json.loads(made.stdout)
    assert (shown["cron"], shown["timezone"], shown["catch_up"]) == (
        "30 9 * * 1-5",
        "America/New_York",
        2,
    )
    assert shown["next_run_at"] and not shown["paused"]
    again = cluster.stint("schedule", "create", "daily", "{}", "--every", "5", "--tenant", "acme")
    assert again.returncode == 2 and "already exists" in again.stderr
    sid = shown["schedule_id"]
    paused = json.loads(cluster.stint("schedule", "pause", sid).stdout)
    assert paused["paused"] and paused["next_run_at"] is None
    detail = json.loads(cluster.stint("schedule", "show", sid).stdout)
    assert detail["recent_ticks"] == [] and detail["name"] == "daily"
    assert json.loads(cluster.stint("schedule", "resume", sid).stdout)["next_run_at"]
    listed = cluster.stint("schedule", "list")
    assert [json.loads(line)["name"] for line in listed.stdout.splitlines()] == ["daily"]
    assert json.loads(cluster.stint("schedule", "delete", sid).stdout)["deleted"]
    assert await count_rows(pool, "schedules") == 0
