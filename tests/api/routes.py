"""The app's own route list, so that tests covering "every route" cover new ones too.

Read from the OpenAPI spec the app generates from its routes (FastAPI's
public view of them); no route of ours is excluded from the schema, so a new
route appears here the moment it is added.
"""

from __future__ import annotations

from stint.api.app import create_app
from stint.config.settings import Settings
from stint.store.config import StoreConfig

PUBLIC = {("GET", "/healthz"), ("GET", "/readyz")}

# A valid body for every route that takes one. A new POST route without an
# entry here fails test_every_route_is_known, so it cannot escape the tests.
BODIES: dict[tuple[str, str], dict[str, object]] = {
    ("POST", "/v1/sessions"): {},
    ("POST", "/v1/sessions/{session_id}/turns"): {"input": {"min_wait_ms": 0}},
    ("POST", "/v1/turns/batch"): {
        "turns": [{"session_id": "00000000-0000-0000-0000-000000000000", "input": {}}]
    },
    ("POST", "/v1/sessions/{session_id}/cancel"): {"reason": "test"},
    ("POST", "/v1/sessions/{session_id}/interrupt"): {"reason": "test"},
    ("POST", "/v1/sessions/{session_id}/answers"): {"step_key": "ask-x", "answer": "yes"},
    ("POST", "/v1/sessions/{session_id}/signals/{name}"): {"payload": {"go": True}},
    ("POST", "/v1/schedules"): {"name": "every-minute", "input": {}, "every_seconds": 60},
    ("POST", "/v1/schedules/{schedule_id}/pause"): {},
    ("POST", "/v1/schedules/{schedule_id}/resume"): {},
    ("POST", "/v1/webhooks"): {"url": "https://hooks.example.com/h", "events": ["turn.completed"]},
    ("POST", "/v1/webhooks/{webhook_id}/enable"): {},
    ("DELETE", "/v1/schedules/{schedule_id}"): {},
    ("DELETE", "/v1/webhooks/{webhook_id}"): {},
}


def api_routes() -> list[tuple[str, str]]:
    """(method, path template) of every route the app serves, docs excluded."""
    spec = create_app(Settings(), StoreConfig(conninfo="")).openapi()
    paths = spec["paths"].items()
    return sorted((method.upper(), path) for path, operations in paths for method in operations)


# Ids for routes of other resources than sessions: tests that reach them for real
# (not only to be refused) pass the ids of a schedule and a webhook they made.
NOWHERE = "00000000-0000-0000-0000-000000000000"


def fill(
    path: str,
    session_id: object,
    turn_id: object,
    *,
    schedule_id: object = NOWHERE,
    webhook_id: object = NOWHERE,
) -> str:
    return path.format(
        session_id=session_id,
        turn_id=turn_id,
        schedule_id=schedule_id,
        webhook_id=webhook_id,
        name="go",  # a signal's name
    )
