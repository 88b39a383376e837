"""argparse options that mirror Settings fields, so ``--help`` shows each
option's variable and default straight from the one Settings definition."""

from __future__ import annotations

import argparse
from typing import Any

from pydantic_core import PydanticUndefined

from stint.config.settings import Settings, env_name

__all__ = ["add_setting", "overrides_from"]


def add_setting(parser: argparse.ArgumentParser, flag: str, field_name: str, **kwargs: Any) -> None:
    """Add ``flag`` for a Settings field; help names its STINT_ variable and default."""
    info = Settings.model_fields[field_name]
    default = info.default if info.default is not PydanticUndefined else None
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
