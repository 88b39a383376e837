-- Stint schema, the HTTP API: its keys, and the index its tenant-scoped listing reads.

-- API keys. The token a client sends is "stk_<id>_<secret>": the id finds the
-- row, the secret is compared (in constant time) with its SHA-256 digest. The
-- secret is 32 random bytes, so a fast hash is the right one: there is nothing
-- to guess, and a stolen table yields no usable token. The secret itself is
-- shown once, when the key is created, and stored nowhere.
CREATE TABLE api_keys (
    id          text        PRIMARY KEY CHECK (id ~ '^[0-9a-f]{16}$'),
    tenant      text        NOT NULL CHECK (tenant ~ '^[A-Za-z0-9._-]{1,100}$'),
    secret_hash bytea       NOT NULL CHECK (octet_length(secret_hash) = 32),
    read_only   boolean     NOT NULL DEFAULT false,
    label       text        CHECK (length(label) <= 200),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE INDEX api_keys_tenant_idx ON api_keys (tenant);

-- A tenant's sessions newest first, paged by keyset (created_at, id): every
-- page is one index range scan, however deep the client has paged.
CREATE INDEX sessions_tenant_created_idx ON sessions (tenant, created_at DESC, id DESC);
