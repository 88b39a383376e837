"""``stint webhook``: a tenant's endpoints for event kinds, and their delivery logs.

Every worker delivers them (signed, retried with backoff, each delivery with
one id). Creating one needs STINT_WEBHOOK_KEY (the key that seals signing
secrets at rest); the secret is printed once, at creation. The rules are the
store's (``stint.store.webhooks.check_endpoint``), the same as
``POST /v1/webhooks``'s; a refusal writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

from stint.config.settings import Settings
from stint.config.target import resolve_store_config
from stint.ops.inputs import UsageError
from stint.store.config import ROLE_CLI
from stint.store.pool import open_pool
from stint.store.sealed import WebhookKey
from stint.store.vocabulary import DeliveryStatus, EventKind
from stint.store.webhooks import Delivery, Endpoint, WebhookStore, check_endpoint

__all__ = ["add_webhook_parser", "cmd_webhook", "delivery_json", "endpoint_json"]


def endpoint_json(row: Endpoint) -> dict[str, Any]:
    """One endpoint as ``stint webhook`` prints it (never its secret)."""
    return {
        "webhook_id": str(row.id),
        "tenant": row.tenant,
        "url": row.url,
        "events": list(row.kinds),
        "description": row.description,
        "enabled": row.disabled_at is None,
        "failing_since": row.failing_since.isoformat() if row.failing_since else None,
        "disabled_at": row.disabled_at.isoformat() if row.disabled_at else None,
        "disabled_reason": row.disabled_reason,
        "created_at": row.created_at.isoformat(),
    }


def delivery_json(row: Delivery) -> dict[str, Any]:
    return {
        "delivery_id": str(row.id),
        "session_id": str(row.session_id),
        "seq": row.seq,
        "kind": row.kind,
        "status": row.status.value,
        "attempts": row.attempts,
        "next_attempt_at": row.next_attempt_at.isoformat(),
        "last_attempt_at": row.last_attempt_at.isoformat() if row.last_attempt_at else None,
        "last_status_code": row.last_status_code,
        "last_error": row.last_error,
        "created_at": row.created_at.isoformat(),
        "delivered_at": row.delivered_at.isoformat() if row.delivered_at else None,
    }


def _id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise UsageError(f"not a webhook id: {text[:60]!r}") from None


def _key(settings: Settings) -> WebhookKey:
    encoded = settings.webhook_key.get_secret_value()
    if not encoded:
        raise UsageError(
            "set STINT_WEBHOOK_KEY (32 random bytes in base64, the same on every worker and "
            "API process): it seals the endpoint's signing secret at rest"
        )
    return WebhookKey(encoded)


async def cmd_webhook(settings: Settings, args: argparse.Namespace) -> int:
    new = key = None
    if args.action == "create":  # every check before any I/O
        new = check_endpoint(
            tenant=args.tenant, url=args.url, kinds=args.event, description=args.description
        )
        key = _key(settings)
    webhook_id = _id(args.webhook_id) if hasattr(args, "webhook_id") else None
    config = resolve_store_config(settings)
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        store = WebhookStore(config, pool)
        if new is not None and key is not None:
            row, secret = await store.create(new, key=key)
            print(json.dumps({**endpoint_json(row), "secret": secret}))
            print(
                "stint webhook: the secret is shown only now; store it as a secret", file=sys.stderr
            )
        elif args.action == "list":
            for row in await store.list_all(tenant=args.tenant):
                print(json.dumps(endpoint_json(row)))
        elif args.action == "deliveries":
            assert webhook_id is not None
            status = DeliveryStatus(args.status) if args.status else None
            rows = await store.deliveries(
                endpoint_id=webhook_id, tenant=None, status=status, limit=args.limit
            )
            for delivery in rows:
                print(json.dumps(delivery_json(delivery)))
        else:
            assert webhook_id is not None
            act = {"delete": store.delete, "enable": store.enable, "show": store.get}
            row = await act[args.action](endpoint_id=webhook_id, tenant=None)
            shown = endpoint_json(row)
            print(json.dumps({**shown, "deleted": True} if args.action == "delete" else shown))
    finally:
        await pool.close()
    return 0


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError("must be 1..1000")
    return value


def add_webhook_parser(sub: Any) -> None:
    """``stint webhook create|list|show|delete|enable|deliveries``."""
    p = sub.add_parser(
        "webhook",
        help="a tenant's webhook endpoints for event kinds, and their delivery logs",
        description="Webhooks: each event of a subscribed kind in a tenant's sessions is "
        "POSTed to the endpoint, signed as Standard Webhooks says (webhook-id, "
        "webhook-timestamp, webhook-signature: HMAC-SHA256 over id.timestamp.body), at least "
        "once, retried with exponential backoff; an endpoint failing for "
        "STINT_WEBHOOK_DISABLE_AFTER_SECONDS is disabled.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = actions.add_parser("create", help="a new endpoint; prints its signing secret once")
    c.add_argument("--tenant", required=True, metavar="T", help="whose sessions' events")
    c.add_argument("--url", required=True, metavar="URL", help="http(s) URL to POST to")
    c.add_argument(
        "--event",
        action="append",
        required=True,
        metavar="KIND",
        help=f"an event kind to deliver (repeatable): {', '.join(k.value for k in EventKind)}",
    )
    c.add_argument("--description", metavar="TEXT", help="a note (1..200 characters)")
    q = actions.add_parser("list", help="endpoints as JSON lines (never their secrets)")
    q.add_argument("--tenant", metavar="T", help="only this tenant's")
    for name, what in (
        ("show", "one endpoint as JSON"),
        ("delete", "delete the endpoint and its delivery log; nothing more is sent"),
        ("enable", "enable an endpoint disabled for failing; its pending deliveries go out"),
    ):
        q = actions.add_parser(name, help=what)
        q.add_argument("webhook_id", metavar="ID")
    q = actions.add_parser("deliveries", help="an endpoint's delivery log, newest first")
    q.add_argument("webhook_id", metavar="ID")
    q.add_argument("--status", choices=[s.value for s in DeliveryStatus], help="only these")
    q.add_argument("--limit", type=_limit, default=50, metavar="N", help="at most N (50)")
    p.set_defaults(run=cmd_webhook)
