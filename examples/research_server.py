"""The research example's MCP server, written with the official ``mcp`` SDK (stdio).

``search_papers`` is read-only (the server says so, so Stint may run a call
cut off by a crash again); ``save_finding`` appends to ``findings.jsonl`` in
the folder ``FINDINGS_DIR`` names, an effect Stint runs at most once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("research")

PAPERS = {
    "durable execution": [
        "Exactly-once side effects with a step journal (2024)",
        "Leases and fencing tokens for worker fleets (2023)",
    ],
}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def search_papers(query: str) -> str:
    """Search the paper index; returns matching titles, one per line."""
    found = [t for topic, titles in PAPERS.items() if topic in query.lower() for t in titles]
    return "\n".join(found) or "no papers found"


@server.tool()
async def save_finding(text: str) -> str:
    """Save a finding to the research log."""
    path = Path(os.environ.get("FINDINGS_DIR", ".")) / "findings.jsonl"
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps({"finding": text}) + "\n")
    return f"saved: {text}"


if __name__ == "__main__":
    server.run()
