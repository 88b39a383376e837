"""`stint keys`: a key's token is printed once, never listed, and dies when revoked."""

from __future__ import annotations

import json

import httpx

from stint.store.keys import parse_token
from stint.store.pool import Pool
from tests.api.conftest import ApiServer, bearer
from tests.workers import Cluster, fetch


async def test_keys_create_list_revoke_through_the_cli(
    cluster: Cluster, api: ApiServer, pool: Pool
) -> None:
    created = cluster.stint("keys", "create", "--tenant", "acme", "--read-only", "--label", "ci")
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)
    assert (key["tenant"], key["read_only"], key["label"]) == ("acme", True, "ci")
    assert key["token"].startswith(f"stk_{key['key_id']}_")
    assert "shown only now" in created.stderr
    listed = cluster.stint("keys", "list", "--tenant", "acme")
    assert listed.returncode == 0 and key["token"] not in listed.stdout
    assert [json.loads(line)["key_id"] for line in listed.stdout.splitlines()] == [key["key_id"]]
    stored = await fetch(pool, "SELECT secret_hash FROM api_keys")
    parsed = parse_token(key["token"])  # the secret may hold "_": split as the store does
    assert parsed is not None and parsed[1].encode() not in bytes(stored[0][0])
    async with httpx.AsyncClient(base_url=api.base_url) as client:
        assert (await client.get("/v1/status", headers=bearer(key["token"]))).status_code == 200
        revoked = cluster.stint("keys", "revoke", key["key_id"])
        assert revoked.returncode == 0 and json.loads(revoked.stdout)["revoked_at"]
        assert (await client.get("/v1/status", headers=bearer(key["token"]))).status_code == 401
    again = cluster.stint("keys", "revoke", key["key_id"])
    assert again.returncode == 2 and "no live key" in again.stderr
    bad = cluster.stint("keys", "create", "--tenant", "not a tenant")
    assert bad.returncode == 2 and "tenant must be" in bad.stderr
    assert key["token"] not in api.log_text()
