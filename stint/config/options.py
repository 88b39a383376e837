"""argparse options that mirror Settings fields, so ``--help`` shows each
option's variable and default straight from the one Settings definition; and
the exit codes at the end of ``--help``, from each program's own table."""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Sequence
from typing import Any

from stint.config.settings import env_name, setting_infos

__all__ = ["ExitCodes", "HelpFormatter", "add_setting", "exit_codes_epilog", "overrides_from"]

ExitCodes = Sequence[tuple[int, str]]
"""A program's or command's exit codes: (code, what it means), in order."""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, but a description or epilog keeps its lines: each is
    wrapped on its own, and an indented one (``  2    bad input``) hangs under
    its text."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        filled = []
        for line in text.splitlines():
            item = re.match(r"\s+\S+\s+", line)
            lead = indent + (item.group() if item else "")
            body = " ".join(line[item.end() if item else 0 :].split())
            filled.append(
                textwrap.fill(body, width, initial_indent=lead, subsequent_indent=" " * len(lead))
                or lead.rstrip()
            )
        return "\n".join(filled)


def exit_codes_epilog(codes: ExitCodes, *, also: str = "", heading: str = "exit codes:") -> str:
    """The ``exit codes:`` section ending a ``--help``; ``also`` is a last line."""
    lines = [heading, *(f"  {code:<4} {meaning}" for code, meaning in codes)]
    return "\n".join([*lines, also] if also else lines)


def add_setting(parser: argparse.ArgumentParser, flag: str, field_name: str, **kwargs: Any) -> None:
    """Add ``flag`` for a Settings field; help names its STINT_ variable and default."""
    info = setting_infos()[field_name]
    default = info.default
    if field_name == "database_url":
        default = "empty: embedded PostgreSQL"
        help_text = (
            f"{info.description} ({env_name(field_name)}; default {default}). "
            "Careful: a command line is visible to every user of the machine (ps, "
            "/proc); prefer STINT_DATABASE_URL or STINT_DATABASE_URL_FILE"
        )
        parser.add_argument(flag, dest=field_name, default=None, help=help_text, **kwargs)
        return
    elif default in (None, []):
        default = "unset"
    help_text = f"{info.description} ({env_name(field_name)}; default {default})"
    parser.add_argument(flag, dest=field_name, default=None, help=help_text, **kwargs)


def overrides_from(args: argparse.Namespace, *fields: str) -> dict[str, Any]:
    """The Settings overrides the user actually gave on the command line."""
    return {f: getattr(args, f) for f in fields if getattr(args, f, None) is not None}
