-- name: sessions_list_all
-- One page of every tenant's sessions, newest first, after the keyset
-- (%(before_created_at)s, %(before_id)s). No index orders all sessions by time
-- (one more index on sessions would cost every claim, renewal and finish), so
-- the page is merged from the per-tenant index (sessions_tenant_created_idx):
-- the distinct tenants by a skip scan of that index, then at most %(limit)s
-- rows of each (and of the sessions without a tenant), then the newest
-- %(limit)s of those. Its cost grows with the number of tenants, never with
-- the number of sessions.
WITH RECURSIVE tenants AS (
    (SELECT tenant FROM sessions WHERE tenant IS NOT NULL ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT s.tenant FROM sessions s WHERE s.tenant > t.tenant ORDER BY s.tenant LIMIT 1)
    FROM tenants t
    WHERE t.tenant IS NOT NULL
), candidates AS (
    SELECT page.*
    FROM tenants t
    CROSS JOIN LATERAL (
        SELECT /*include:session_columns*/
        FROM sessions
        WHERE tenant = t.tenant
          AND (cardinality(%(statuses)s::text[]) = 0 OR status = ANY (%(statuses)s::text[]))
          AND (%(before_created_at)s::timestamptz IS NULL
               OR (created_at, id) < (%(before_created_at)s::timestamptz, %(before_id)s::uuid))
        ORDER BY created_at DESC, id DESC
        LIMIT %(limit)s
    ) AS page
    WHERE t.tenant IS NOT NULL
    UNION ALL
    (SELECT /*include:session_columns*/
     FROM sessions
     WHERE tenant IS NULL
       AND (cardinality(%(statuses)s::text[]) = 0 OR status = ANY (%(statuses)s::text[]))
       AND (%(before_created_at)s::timestamptz IS NULL
            OR (created_at, id) < (%(before_created_at)s::timestamptz, %(before_id)s::uuid))
     ORDER BY created_at DESC, id DESC
     LIMIT %(limit)s)
)
SELECT * FROM candidates ORDER BY created_at DESC, id DESC LIMIT %(limit)s

-- name: turns_recent
-- A session's newest %(limit)s turns, newest first; with %(tenant)s set, only if
-- the session is that tenant's.
SELECT /*include:turn_columns*/
FROM turns t
JOIN sessions s ON s.id = t.session_id
WHERE t.session_id = %(session_id)s AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s)
ORDER BY t.seq DESC
LIMIT %(limit)s

-- name: steps_recent
-- A session's newest %(limit)s journal entries (steps), newest first: an
-- ``unknown`` one is an effect that may or may not have happened.
SELECT st.turn_id, t.seq AS turn_seq, st.step_key, st.kind, st.status, st.lease_epoch,
       st.started_at, st.finished_at
FROM steps st
JOIN turns t ON t.id = st.turn_id
JOIN sessions s ON s.id = st.session_id
WHERE st.session_id = %(session_id)s AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s)
ORDER BY st.started_at DESC, st.step_key
LIMIT %(limit)s

-- name: questions_open
-- The session's questions waiting for an answer: a parked turn's started
-- ``answer`` step, with the question its approval.requested event carries.
SELECT st.turn_id, t.seq AS turn_seq, st.step_key, st.started_at AS asked_at,
       (SELECT e.payload -> 'question'
        FROM events e
        WHERE e.session_id = st.session_id AND e.turn_id = st.turn_id
          AND e.kind = 'approval.requested' AND e.payload ->> 'step_key' = st.step_key
        ORDER BY e.seq DESC
        LIMIT 1) AS question
FROM steps st
JOIN turns t ON t.id = st.turn_id
JOIN sessions s ON s.id = st.session_id
WHERE st.session_id = %(session_id)s AND st.kind = 'answer' AND st.status = 'started'
  AND t.status = 'parked'
  AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s)
ORDER BY t.seq

-- name: keys_tenants
-- The tenants that have keys: the operator's tenant filter offers these.
SELECT DISTINCT tenant FROM api_keys ORDER BY tenant
