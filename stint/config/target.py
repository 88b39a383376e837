"""Resolve where Stint's database is: the configured URL, or the embedded cluster."""

from __future__ import annotations

import logging
from pathlib import Path

from stint.config.settings import Settings
from stint.postgres.embedded import EmbeddedPostgres, default_data_dir
from stint.store.config import StoreConfig

__all__ = ["embedded_cluster", "resolve_store_config", "workspace_dir"]

log = logging.getLogger("stint.target")


def embedded_cluster(settings: Settings) -> EmbeddedPostgres:
    """The embedded cluster these settings name (not started)."""
    return EmbeddedPostgres(
        settings.data_dir or default_data_dir(),
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
    return settings.workspace or (settings.data_dir or default_data_dir()) / "workspace"
