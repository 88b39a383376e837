-- name: dashboard_sessions_insert
-- A browser signed in: only the secret's digest is kept.
INSERT INTO dashboard_sessions (id, secret_hash, key_id, expires_at)
VALUES (%(id)s, %(secret_hash)s, %(key_id)s, now() + make_interval(secs => %(seconds)s))

-- name: dashboard_sessions_find_live
-- The session a cookie names and the key it was opened with, while neither was
-- revoked and the session has not expired; the caller compares the secret.
SELECT k.id AS key_id, k.tenant, k.read_only, k.operator, d.secret_hash
FROM dashboard_sessions d
JOIN api_keys k ON k.id = d.key_id
WHERE d.id = %(id)s AND d.revoked_at IS NULL AND d.expires_at > now()
  AND k.revoked_at IS NULL

-- name: dashboard_sessions_revoke
-- Sign-out: the session ends now (a second sign-out changes nothing).
UPDATE dashboard_sessions SET revoked_at = now()
WHERE id = %(id)s AND revoked_at IS NULL
