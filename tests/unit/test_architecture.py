"""The package picture in docs/architecture.md is drawn from the real imports.

The test fails when the committed picture no longer matches the code (rewrite
it with STINT_WRITE_ARCHITECTURE=1 and review the diff) and when the store,
the bottom layer, imports anything of Stint's above it. The import-linter
contracts in pyproject.toml enforce the full layering in ``make lint``.
"""

from __future__ import annotations

import os
from pathlib import Path

import grimp

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
# Top to bottom: each package may import only packages below it.
PACKAGES = [
    "lab",
    "client",
    "ops",
    "agents",
    "api",
    "worker",
    "telemetry",
    "config",
    "postgres",
    "store",
]


def _edges() -> list[tuple[str, str]]:
    graph = grimp.build_graph("stint", exclude_type_checking_imports=True)
    return [
        (a, b)
        for a in PACKAGES
        for b in PACKAGES
        if a != b
        and graph.direct_import_exists(
            importer=f"stint.{a}", imported=f"stint.{b}", as_packages=True
        )
    ]


def render(edges: list[tuple[str, str]]) -> str:
    lines = [
        "# Architecture: packages and what imports what",
        "",
        "Drawn from the code's real imports by `tests/unit/test_architecture.py`",
        "(`STINT_WRITE_ARCHITECTURE=1 pytest tests/unit/test_architecture.py` redraws it);",
        "`make lint` enforces the layering with import-linter (`pyproject.toml`).",
        "Every arrow points down: `store` sits at the bottom and imports nothing above it.",
        "",
        "```mermaid",
        "flowchart TD",
    ]
    lines += [f"    {name}[stint.{name}]" for name in PACKAGES]
    lines += [f"    {a} --> {b}" for a, b in edges]
    lines += ["```", "", "| package | imports |", "| --- | --- |"]
    for name in PACKAGES:
        below = [b for a, b in edges if a == name]
        lines.append(f"| `stint.{name}` | {', '.join(f'`{b}`' for b in below) or 'nothing'} |")
    return "\n".join(lines) + "\n"


def test_every_import_points_down_the_layers() -> None:
    for importer, imported in _edges():
        assert PACKAGES.index(importer) < PACKAGES.index(imported), (importer, imported)


def test_the_store_imports_nothing_of_ours() -> None:
    assert [b for a, b in _edges() if a == "store"] == []


def test_the_api_and_the_worker_are_independent() -> None:
    """Two processes, two siblings: neither may import the other (the API sees the
    worker only through the database)."""
    edges = _edges()
    assert ("api", "worker") not in edges and ("worker", "api") not in edges


def test_the_committed_picture_matches_the_code() -> None:
    drawn = render(_edges())
    if os.environ.get("STINT_WRITE_ARCHITECTURE"):
        DOC.write_text(drawn)
    assert DOC.read_text() == drawn
