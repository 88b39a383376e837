-- name: keys_insert
INSERT INTO api_keys (id, tenant, secret_hash, read_only, label, operator)
VALUES (%(id)s, %(tenant)s, %(secret_hash)s, %(read_only)s, %(label)s, %(operator)s)
RETURNING id, tenant, read_only, label, created_at, revoked_at, operator

-- name: keys_list
SELECT id, tenant, read_only, label, created_at, revoked_at, operator
FROM api_keys
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s
ORDER BY tenant, created_at, id

-- name: keys_revoke
UPDATE api_keys SET revoked_at = now()
WHERE id = %(id)s AND revoked_at IS NULL
RETURNING id, tenant, read_only, label, created_at, revoked_at, operator

-- name: keys_find_live
-- The key a token names, unless it was revoked; the caller compares the secret.
SELECT id, tenant, read_only, operator, secret_hash
FROM api_keys
WHERE id = %(id)s AND revoked_at IS NULL
