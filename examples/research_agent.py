"""A research agent on Pydantic AI whose tools come from an MCP server, run durably by Stint.

One command, no API key (the fake provider, the embedded PostgreSQL)::

    .venv/bin/python examples/research_agent.py [FOLDER]

(FOLDER holds the MCP servers file and the findings; a temporary folder by default.)

With a real provider: ``OPENAI_BASE_URL=https://... OPENAI_API_KEY=... OPENAI_MODEL=...``
before the same command. The agent is plain Pydantic AI code with no tools of
its own; its tools come from ``research_server.py``, an MCP server named in
``STINT_MCP_SERVERS`` (the file this command writes beside the worker): each
worker starts one server process, and every tool call is a durable step, so a
crashed worker's replay never saves the same finding twice.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from pydantic_ai import Agent

from stint.adapters.pydantic_ai import durable
from stint.lab.demo_agent import AgentDemo, run_example
from stint.lab.fake_script import FakeCall, FakeRule, FakeScript

HERE = Path(__file__).resolve().parent

researcher: Agent[None, str] = Agent(
    instructions="You research topics: search for papers, then save the most relevant finding."
)

harness = durable(researcher)

CONVERSATION = ("Find papers on durable execution and save the best one.",)
SCRIPT = FakeScript(
    (
        FakeRule(
            when="durable execution",
            rounds=(
                (FakeCall("search_papers", {"query": "durable execution"}),),
                (FakeCall("save_finding", {"text": "Exactly-once side effects (2024)"}),),
            ),
            reply="I found two papers and saved the best one ({results}).",
        ),
    )
)
"""What the fake provider answers for this conversation (no key needed)."""


def _servers(folder: Path) -> Path:
    """The MCP servers file for the worker: this example's server, over stdio."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mcp-servers.json"
    server = {
        "name": "research",
        "command": sys.executable,
        "args": [str(HERE / "research_server.py")],
    }
    path.write_text(json.dumps({"servers": [{**server, "env": {"FINDINGS_DIR": str(folder)}}]}))
    return path


if __name__ == "__main__":
    default = Path(tempfile.gettempdir()) / "stint-research-example"
    state = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    sys.exit(
        run_example(
            AgentDemo(
                harness="research_agent:harness",
                conversation=CONVERSATION,
                script=SCRIPT,
                schema="stint_example_research",
                name="example-research",
                env={"PYTHONPATH": str(HERE), "STINT_MCP_SERVERS": str(_servers(state))},
            )
        )
    )
