"""Importing the client costs nothing server-side: a fresh interpreter that imports
``stint.client`` loads none of Stint's server packages and none of their heavy
dependencies; and the worker and the API never load the client."""

from __future__ import annotations

from tests.imports_probe import modules_loaded

_SERVER_SIDE = (
    "stint.store",
    "stint.postgres",
    "stint.config",
    "stint.telemetry",
    "stint.worker",
    "stint.api",
    "stint.agents",
    "stint.ops",
    "stint.lab",
    "psycopg",
    "psycopg_pool",
    "fastapi",
    "starlette",
    "uvicorn",
    "uvloop",
    "opentelemetry",
    "prometheus_client",
    "openai",
    "pydantic_settings",
)

_PROBE = """
import json, sys
for name in sys.argv[2:]:
    __import__(name)
watched = sys.argv[1].split(",")
print(json.dumps(sorted(m for m in sys.modules if m in watched or m.split(".")[0] in watched
                        or any(m.startswith(w + ".") for w in watched))))
"""


def _loaded(watched: tuple[str, ...], *modules: str) -> list[str]:
    return modules_loaded(_PROBE, ",".join(watched), *modules)


def test_importing_the_client_loads_nothing_of_the_server_side() -> None:
    assert _loaded(_SERVER_SIDE, "stint.client") == []


def test_it_loads_what_it_calls_the_api_with() -> None:
    loaded = _loaded(("httpx", "httpx_sse", "pydantic"), "stint.client")
    assert {"httpx", "httpx_sse", "pydantic"} <= set(loaded)


def test_the_worker_and_the_api_never_load_the_client() -> None:
    server = ("stint.worker.main", "stint.worker.supervisor", "stint.api.app", "stint.ops.cli")
    assert _loaded(("stint.client", "httpx_sse"), *server) == []
