"""``stint api``: serve the app with uvicorn on uvloop and httptools (guarded by
``stint.api.connections``), until SIGTERM.

On SIGTERM (or Ctrl+C) uvicorn stops accepting connections; the hub then
tells every event stream to end, so open streams close at once (their
clients resume elsewhere by Last-Event-ID) instead of holding the shutdown
for ``STINT_API_SHUTDOWN_SECONDS``. The process exits 0 after a clean stop.
"""

from __future__ import annotations

import logging
import signal
import socket
from types import FrameType

import uvicorn
import uvloop
from fastapi import FastAPI

from stint.api.allocator import return_large_allocations
from stint.api.app import create_app
from stint.api.connections import ConnectionLimits, connection_cap, guarded_protocol
from stint.api.services import Services
from stint.config.settings import Settings
from stint.config.target import resolve_store_config
from stint.store.migrate import migrate

__all__ = ["serve"]

log = logging.getLogger("stint.api")


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        found = getattr(self._app.state, "services", None)
        if isinstance(found, Services):
            found.hub.close_followers()
        await super().shutdown(sockets)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """uvicorn re-raises the signal it stopped for; handled here, the exit is clean."""


def serve(settings: Settings) -> int:
    return_large_allocations()
    config = resolve_store_config(settings)
    if settings.auto_migrate:
        for applied in uvloop.run(migrate(config)):
            log.info("applied migration %s", applied.label)
    app = create_app(settings, config)
    server = _Server(
        uvicorn.Config(
            app,
            host=settings.api_host,
            port=settings.api_port,
            loop="uvloop",
            http=guarded_protocol(
                ConnectionLimits(
                    max_header_bytes=settings.api_max_header_bytes,
                    header_seconds=settings.api_header_seconds,
                    max_connections=connection_cap(settings.api_max_connections),
                    send_buffer_bytes=settings.api_send_buffer_bytes,
                )
            ),
            timeout_keep_alive=settings.api_idle_seconds,
            lifespan="on",
            log_config=None,
            access_log=settings.log_level.upper() == "DEBUG",
            server_header=False,
            timeout_graceful_shutdown=settings.api_shutdown_seconds,
        ),
        app,
    )
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run()
    except SystemExit:
        # uvicorn exits 3 when it cannot start (its port taken); the CLI reference
        # (stint.ops.exit_codes) says 1 for "cannot run".
        log.error(
            "stint api could not start on %s port %d (taken, or a failed startup: see above)",
            settings.api_host,
            settings.api_port,
        )
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if server.started else 1
