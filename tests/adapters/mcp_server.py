"""An MCP server for the tests, written with the official SDK.

Run as ``python -m tests.adapters.mcp_server``.

``append_note`` appends one line to the file named by ``ADAPTER_EFFECTS`` (an
effect a test counts); ``count_notes`` only reads it and says so (read-only).
``--http PORT`` serves streamable HTTP on 127.0.0.1 instead of stdio; there,
either tool can be held (``append_note`` after its effect) until a gate file
exists (``MCP_GATE``), so a test can cut the connection mid-call; ``MCP_CALLS``
names a file where ``count_notes`` counts its calls.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from tests.adapters.effects import EFFECTS_ENV, append_effect, read_effects

server = MCPServer("notes")


@server.tool()
async def append_note(text: str) -> str:
    """Append a note to the shared notes file."""
    append_effect({"tool": "append_note", "text": text, "pid": os.getpid()})
    await _gate()
    return f"noted: {text}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def count_notes() -> str:
    """How many notes the file holds."""
    calls = os.environ.get("MCP_CALLS")  # where a test counts the calls this server got
    if calls:
        with open(calls, "a", encoding="utf-8") as out:
            out.write("count_notes\n")
    await _gate()
    return f"{len(read_effects(Path(os.environ[EFFECTS_ENV])))} notes"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def sees(variable: str) -> str:
    """Whether this server's environment holds ``variable`` (never its value)."""
    return f"{variable}: {'yes' if variable in os.environ else 'no'}"


async def _gate() -> None:
    """Hold the call until the gate file (``MCP_GATE``) exists, when one is named."""
    gate = os.environ.get("MCP_GATE")
    # The gate is a file the test process creates: no event crosses processes.
    while gate and not await asyncio.to_thread(os.path.exists, gate):  # noqa: ASYNC110
        await asyncio.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=0, help="serve streamable HTTP on this port")
    args = parser.parse_args()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
