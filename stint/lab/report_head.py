"""The head every load report opens with: its title, when it was made and the
command that made it, so a figure can always be traced back and rerun."""

from __future__ import annotations

__all__ = ["report_head"]


def report_head(title: str, generated_at: str, command: str) -> list[str]:
    """Markdown lines: ``# title``, the generation time, the command in a code block."""
    return [f"# {title}", "", f"Generated {generated_at} by:", "", "```", command, "```", ""]
