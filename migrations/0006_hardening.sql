-- Stint schema 0006: hardening.

-- Idempotent session creation: `stint enqueue --idempotency-key K` without a
-- session creates the session once per tenant; a producer's retry finds it by
-- (tenant, K) instead of creating another one.
ALTER TABLE sessions ADD COLUMN creation_key text;
CREATE UNIQUE INDEX sessions_creation_key_idx
    ON sessions ((coalesce(tenant, '')), creation_key)
    WHERE creation_key IS NOT NULL;

-- Each worker's lease length: a worker whose heartbeat is older than its lease
-- holds nothing any more and is shown as dead (kill -9 leaves its row running).
ALTER TABLE workers ADD COLUMN lease_seconds real CHECK (lease_seconds > 0);
