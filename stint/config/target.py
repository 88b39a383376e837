"""Resolve where Stint's database is: the configured URL, or the embedded cluster.

The embedded cluster's machinery (binary discovery, process control) is
imported only when it is used: a worker given a URL does not carry it (about
2 MiB of resident memory in every worker process).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from stint.config.settings import Settings
from stint.store.config import StoreConfig

if TYPE_CHECKING:
    from stint.postgres.embedded import EmbeddedPostgres

__all__ = ["embedded_cluster", "resolve_store_config", "workspace_dir"]

log = logging.getLogger("stint.target")


def embedded_cluster(settings: Settings) -> EmbeddedPostgres:
    """The embedded cluster these settings name (not started)."""
    from stint.postgres.embedded import EmbeddedPostgres

    return EmbeddedPostgres(
        _data_dir(settings),
        bindir=settings.pg_bindir,
        run_as=settings.pg_run_as,
    )


def resolve_store_config(settings: Settings) -> StoreConfig:
    """The store config to use; starts (or reuses) the embedded cluster when no
    STINT_DATABASE_URL is set."""
    url = settings.database_url.get_secret_value()
    if url:
        return settings.store_config(url)
    handle = embedded_cluster(settings).start()
    return settings.store_config(handle.conninfo())


def workspace_dir(settings: Settings) -> Path:
    """STINT_WORKSPACE, else ``workspace`` beside the embedded cluster's data."""
    return settings.workspace or _data_dir(settings) / "workspace"


def _data_dir(settings: Settings) -> Path:
    if settings.data_dir is not None:
        return settings.data_dir
    from stint.postgres.embedded import default_data_dir

    return default_data_dir()
