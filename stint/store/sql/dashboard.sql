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

-- name: dashboard_children_level
-- One level of a session tree as the dashboard draws it. For each session of
-- %(parents)s (in that order; with %(tenant)s set, only that tenant's): how
-- many children it has, counted up to %(count_cap)s and no further, and its
-- first %(per_parent)s children, oldest first, each with its session's depth
-- and status, its policy on a cancel of its parent, and its latest turn's
-- number and status. A parent with no child shown still has one row (child_id
-- NULL): %(per_parent)s = 0 asks for the counts alone. Its cost is bounded by
-- the parents given, %(per_parent)s and %(count_cap)s, never by the tree.
SELECT p.parent_id, n.total, c.child_id, c.on_cancel, c.depth, c.session_status,
       c.turn_seq, c.turn_status
FROM unnest(%(parents)s::uuid[]) WITH ORDINALITY AS p(parent_id, ord)
JOIN sessions ps ON ps.id = p.parent_id
CROSS JOIN LATERAL (
    SELECT count(*) AS total
    FROM (SELECT FROM children k
          WHERE k.parent_id = p.parent_id
          LIMIT %(count_cap)s) AS capped
) AS n
LEFT JOIN LATERAL (
    SELECT k.child_id, k.on_cancel, k.created_at, s.depth, s.status AS session_status,
           latest.seq AS turn_seq, latest.status AS turn_status
    FROM children k
    JOIN sessions s ON s.id = k.child_id
    LEFT JOIN LATERAL (
        SELECT t.seq, t.status
        FROM turns t
        WHERE t.session_id = k.child_id
        ORDER BY t.seq DESC
        LIMIT 1
    ) AS latest ON true
    WHERE k.parent_id = p.parent_id
    ORDER BY k.created_at, k.child_id
    LIMIT %(per_parent)s
) AS c ON true
WHERE %(tenant)s::text IS NULL OR ps.tenant = %(tenant)s
ORDER BY p.ord, c.created_at, c.child_id

-- name: dashboard_waits_open
-- What the session's turns wait on now: each started wait step of a turn
-- that has not ended (a set-aside turn is queued), oldest first, with what
-- it waits for (a timer, a signal's name, children: the first
-- %(children_shown)s of their ids, how many there are and how many have
-- ended) and its deadline; for a signal wait, how many signals of its name
-- are kept unconsumed. With %(tenant)s set, only if the session is that
-- tenant's.
SELECT w.turn_id, t.seq AS turn_seq, w.step_key, w.kind, w.name, w.deadline, w.wait_all,
       coalesce(w.children[1:%(children_shown)s::int], '{}') AS children,
       coalesce(cardinality(w.children), 0) AS children_total,
       (SELECT count(*) FROM children k
        WHERE k.parent_id = w.session_id AND k.child_id = ANY (w.children)
          AND k.reported_at IS NOT NULL) AS children_ended,
       (SELECT count(*) FROM signals g
        WHERE g.session_id = w.session_id AND g.name = w.name
          AND g.consumed_at IS NULL) AS signals_kept
FROM waits w
JOIN steps st ON st.session_id = w.session_id AND st.turn_id = w.turn_id
             AND st.step_key = w.step_key
JOIN turns t ON t.id = w.turn_id
JOIN sessions s ON s.id = w.session_id
WHERE w.session_id = %(session_id)s AND st.status = 'started'
  AND t.status IN ('queued', 'running')
  AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s)
ORDER BY w.created_at, w.step_key
LIMIT %(limit)s

-- name: dashboard_signals_kept
-- The session's signals that no wait has consumed yet, oldest first (the
-- order waits consume them in), at most %(limit)s, each payload's text cut
-- at %(payload_chars)s characters; with %(tenant)s set, only if the session
-- is that tenant's.
SELECT g.id, g.name, g.created_at, left(g.payload::text, %(payload_chars)s::int) AS payload_text,
       length(g.payload::text) > %(payload_chars)s AS payload_cut
FROM signals g
JOIN sessions s ON s.id = g.session_id
WHERE g.session_id = %(session_id)s AND g.consumed_at IS NULL
  AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s)
ORDER BY g.created_at, g.id
LIMIT %(limit)s
