"""Fault test: the disk holding the effect journals fills up.

The worker's workspace is a 64 KiB tmpfs mounted by the test, filled up with a
filler file. A native effect that cannot be written must not be committed: the
step is surfaced as unknown, the turn fails with a clear "No space left on
device", a line torn by the full disk is cut off again, and once space is
freed the same worker processes new turns normally.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from stint.ops.checks import run_checks
from stint.store.client import ClientStore
from stint.store.pool import Pool
from stint.store.vocabulary import AdmissionLimit
from tests.polling import wait_until
from tests.workers import Cluster, WorkerProc, event_kinds, fetch, set_limits

TMPFS_SIZE = "64k"
NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"
PAGE = os.sysconf("SC_PAGE_SIZE")  # tmpfs allocates file space a page at a time


@pytest.fixture
def small_disk(workspace: Path, cluster: Cluster) -> Iterator[Path]:
    """Mount a 64 KiB tmpfs on the workspace; stop the workers, then unmount."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0755", "tmpfs", str(workspace)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield workspace
    finally:
        cluster.stop_all()
        if subprocess.run(["umount", str(workspace)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(workspace)], check=False)


def fill(path: Path) -> int:
    """Write ``path`` until the file system has no page left; returns its size."""
    block = b"\0" * PAGE
    with path.open("wb", buffering=0) as filler:
        try:
            while True:
                filler.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return path.stat().st_size


def journal_bytes(cluster: Cluster, sid: UUID) -> bytes:
    path = cluster.workspace / "journals" / f"{sid}.journal"
    return path.read_bytes() if path.exists() else b""


def assert_whole_lines(content: bytes) -> None:
    """No torn line: the journal is empty or ends in a newline, each line is JSON."""
    assert not content or content.endswith(b"\n"), content[-200:]
    for line in content.splitlines():
        json.loads(line)


async def enqueue(client: ClientStore, sid: UUID | None, key: str) -> UUID:
    queued = await client.turns_enqueue(
        session_id=sid, idempotency_key=key, turn_input={"min_wait_ms": 0}
    )
    return queued.session_id


async def finished(pool: Pool, expected: int) -> bool:
    rows = await fetch(pool, "SELECT count(*) FROM turns WHERE finished_at IS NOT NULL")
    return bool(rows[0][0] >= expected)


async def tool_steps(pool: Pool) -> dict[str, int]:
    rows = await fetch(pool, "SELECT status, count(*) FROM steps WHERE kind = 'tool' GROUP BY 1")
    return {status: n for status, n in rows}


def journal_lines(cluster: Cluster) -> int:
    return sum(
        len(p.read_bytes().splitlines()) for p in (cluster.workspace / "journals").glob("*.journal")
    )


async def test_fault_full_disk_never_commits_an_effect_without_its_journal_line(
    small_disk: Path, cluster: Cluster, pool: Pool
) -> None:
    """With the journal's disk full, a turn's effect cannot be written: its step is
    never committed (it is marked unknown), the turn fails saying "No space left
    on device", the journal keeps only whole lines (a line torn at the page
    boundary is cut off), and after space is freed new turns succeed."""
    client = ClientStore(cluster.db.config, pool)
    # A page of journal lines is queued on one session faster than it runs.
    await set_limits(pool, cluster.db.config, {AdmissionLimit.MAX_SESSION_QUEUE: 64})
    worker: WorkerProc = cluster.start_worker(slots=2)

    # Fill the first page of one session's journal so that its next line
    # straddles the page boundary: with the disk full, that write is torn.
    crossing = await enqueue(client, None, "c0")
    await wait_until(lambda: finished(pool, 1), what="the first turn")
    line = len(journal_bytes(cluster, crossing))
    per_page = PAGE // line
    for i in range(1, per_page):
        await enqueue(client, crossing, f"c{i}")
    await wait_until(lambda: finished(pool, per_page), what=f"{per_page} turns", within=60)
    before = journal_bytes(cluster, crossing)
    assert len(before) == per_page * line and len(before) + line > PAGE

    # A probe file shaped like that journal shows what the disk does to such a
    # line once it is full: a short write (the line torn), then ENOSPC.
    probe = small_disk / "probe"
    probe.write_bytes(b"x" * len(before))
    filler = small_disk / "filler"
    assert fill(filler) > 0
    with probe.open("ab", buffering=0) as torn:
        assert torn.write(b"y" * line) == PAGE - len(before)
    await enqueue(client, crossing, "c-full")
    fresh = await enqueue(client, None, "f-full")  # a new journal file on the full disk
    await wait_until(lambda: finished(pool, per_page + 2), what="the turns on a full disk")

    failed = await fetch(
        pool,
        "SELECT t.session_id, t.error, s.status FROM turns t "
        "LEFT JOIN steps s ON s.turn_id = t.id WHERE t.status <> 'succeeded'",
    )
    assert sorted(sid for sid, _, _ in failed) == sorted([crossing, fresh])
    for _, error, step_status in failed:
        assert NO_SPACE in error, error
        assert step_status == "unknown"  # never committed without its line
    for sid in (crossing, fresh):
        assert (await event_kinds(pool, sid))[-2:] == ["effect.unknown", "turn.failed"]
    reasons = await fetch(
        pool, "SELECT payload->>'reason' FROM events WHERE kind = 'effect.unknown'"
    )
    assert all(NO_SPACE in r for (r,) in reasons), reasons
    assert NO_SPACE in worker.log_text()
    assert journal_bytes(cluster, crossing) == before  # the torn tail was cut off
    assert journal_bytes(cluster, fresh) == b""
    assert await tool_steps(pool) == {"committed": per_page, "unknown": 2}
    assert journal_lines(cluster) == per_page

    filler.unlink()
    await enqueue(client, crossing, "c-freed")
    freed = await enqueue(client, None, "n-freed")
    await wait_until(lambda: finished(pool, per_page + 4), what="the turns after space was freed")
    rows = await fetch(
        pool, "SELECT status FROM turns WHERE idempotency_key IN ('c-freed', 'n-freed')"
    )
    assert rows == [("succeeded",), ("succeeded",)]
    for sid in (crossing, fresh, freed):
        assert_whole_lines(journal_bytes(cluster, sid))
    assert len(journal_bytes(cluster, crossing).splitlines()) == per_page + 1
    assert await tool_steps(pool) == {"committed": per_page + 2, "unknown": 2}
    assert journal_lines(cluster) == per_page + 2
    assert worker.proc.poll() is None
    report = await run_checks(pool, journals=cluster.workspace / "journals", faults={})
    assert report.passed, report.as_json()
