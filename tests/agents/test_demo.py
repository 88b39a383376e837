"""``stint-lab demo --agent`` end to end: fake provider, a real worker, a streamed conversation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stint.postgres.scratch import ScratchTarget

pytestmark = pytest.mark.acceptance


async def test_the_agent_demo_converses_with_tools_and_passes_its_checks(
    db: ScratchTarget, tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "stint.lab.cli", "demo", "--agent"],
        env={
            **os.environ,
            "STINT_DATABASE_URL": db.conninfo,
            "STINT_WORKSPACE": str(tmp_path),
            "STINT_DATA_DIR": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for seen in (
        "[calling add] I asked the calculator: 19 + 23 = 42.0.",
        "[calling note] Saved to your journal",
        "[parked: approve",
        "[calling deploy] Deployment: web 1.2.3 is rolling out.",
        "I remember 12 earlier messages",
        "checks passed: True",
    ):
        assert seen in out, out
