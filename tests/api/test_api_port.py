"""Acceptance: ``stint api`` on a port already taken exits with the code its
reference gives (issue 22, finding 8: it exited 3, the reference said 1)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from stint.lab.processes import spawn_api
from stint.ops.exit_codes import COMMANDS, EXIT_FAILED
from stint.postgres.scratch import ScratchTarget
from tests.api.conftest import api_env


async def test_a_taken_port_exits_as_the_reference_says(db: ScratchTarget, tmp_path: Path) -> None:
    assert (EXIT_FAILED, "cannot run (the database, a port taken)") in COMMANDS["api"]
    log = tmp_path / "api.log"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = spawn_api(env=api_env(db), port=port, log_path=log)
        code = await asyncio.to_thread(proc.wait, 120)
    text = log.read_text(errors="replace")
    assert code == EXIT_FAILED, text
    assert f"port {port}" in text and "Traceback" not in text, text
