-- name: admission_effective
-- The limits that apply to %(tenant)s (NULL: sessions without a tenant): its
-- own row's, column by column, else the '*' row's; the backlog is global.
SELECT coalesce(t.max_queued, d.max_queued) AS max_queued,
       coalesce(t.max_running, d.max_running) AS max_running,
       coalesce(t.max_session_queue, d.max_session_queue) AS max_session_queue,
       d.global_backlog,
       coalesce(t.max_sessions, d.max_sessions) AS max_sessions
FROM admission_limits d
LEFT JOIN admission_limits t ON t.tenant = %(tenant)s::text
WHERE d.tenant = '*'

-- name: admission_lock
-- Serialises the enqueues that count the same usage, until their transactions
-- end: one lock per tenant (when it has a tenant limit) and one for the global
-- backlog (when set), always in that order. The counts that follow are read in
-- a later statement, whose snapshot sees every enqueue that held the lock
-- before. Keys are per schema, so load-test schemas never wait for each other.
SELECT CASE WHEN %(tenant_scope)s THEN
           pg_advisory_xact_lock(hashtext('stint.admission:' || current_schema()),
                                 hashtext('tenant:' || coalesce(%(tenant)s::text, '')))::text
       END AS tenant_lock,
       CASE WHEN %(global_scope)s THEN
           pg_advisory_xact_lock(hashtext('stint.admission:' || current_schema()),
                                 hashtext('global'))::text
       END AS global_lock

-- name: admission_lock_sessions
-- Serialises the creators of %(tenant)s's sessions until their transactions
-- end (a key of its own: the turn limits' lock is taken later in the same
-- transaction, always in this order). The count that follows is read in a
-- later statement, whose snapshot sees every session created under the lock
-- before.
SELECT pg_advisory_xact_lock(hashtext('stint.admission:' || current_schema()),
                             hashtext('sessions:' || coalesce(%(tenant)s::text, '')))::text
       AS sessions_lock

-- name: admission_sessions
-- How many sessions %(tenant)s holds (any status), and whether one was already
-- created with %(creation_key)s (a retry, which admission lets through to find
-- it). Two branches so that each probes sessions_tenant_created_idx: a NULL
-- tenant matches nothing in the first, the second runs only for it.
SELECT (SELECT count(*) FROM sessions WHERE tenant = %(tenant)s::text)
       + (SELECT count(*) FROM sessions WHERE %(tenant)s::text IS NULL AND tenant IS NULL)
       AS sessions,
       EXISTS (SELECT FROM sessions
               WHERE coalesce(tenant, '') = coalesce(%(tenant)s::text, '')
                 AND creation_key = %(creation_key)s::text) AS keyed

-- name: admission_usage
-- What %(tenant)s has in flight (unfinished turns, active sessions) and, when
-- %(global_scope)s, the whole backlog: from sessions_open_tenant_idx only.
SELECT coalesce(sum(queued_turns), 0)::bigint AS queued, count(*)::bigint AS running,
       CASE WHEN %(global_scope)s THEN
           (SELECT coalesce(sum(queued_turns), 0) FROM sessions WHERE queued_turns > 0)
       END::bigint AS backlog
FROM sessions
WHERE coalesce(tenant, '') = coalesce(%(tenant)s::text, '') AND queued_turns > 0

-- name: admission_set
-- Writes only the columns whose set_ flag is true; the others keep their value.
INSERT INTO admission_limits AS a (tenant, max_queued, max_running, max_session_queue,
                                   global_backlog, max_sessions, max_depth, max_fanout)
VALUES (%(tenant)s, %(max_queued)s, %(max_running)s, %(max_session_queue)s, %(global_backlog)s,
        %(max_sessions)s, %(max_depth)s, %(max_fanout)s)
ON CONFLICT (tenant) DO UPDATE SET
    max_queued        = CASE WHEN %(set_max_queued)s THEN excluded.max_queued
                             ELSE a.max_queued END,
    max_running       = CASE WHEN %(set_max_running)s THEN excluded.max_running
                             ELSE a.max_running END,
    max_session_queue = CASE WHEN %(set_max_session_queue)s THEN excluded.max_session_queue
                             ELSE a.max_session_queue END,
    global_backlog    = CASE WHEN %(set_global_backlog)s THEN excluded.global_backlog
                             ELSE a.global_backlog END,
    max_sessions      = CASE WHEN %(set_max_sessions)s THEN excluded.max_sessions
                             ELSE a.max_sessions END,
    max_depth         = CASE WHEN %(set_max_depth)s THEN excluded.max_depth
                             ELSE a.max_depth END,
    max_fanout        = CASE WHEN %(set_max_fanout)s THEN excluded.max_fanout
                             ELSE a.max_fanout END,
    updated_at        = now()

-- name: admission_list
-- Every limits row with what its tenant has in flight now, and how many
-- sessions it holds ('*' shows the sessions without a tenant, which it
-- governs; and the whole backlog).
SELECT a.tenant, a.max_queued, a.max_running, a.max_session_queue, a.global_backlog,
       a.max_sessions, a.max_depth, a.max_fanout,
       coalesce(u.queued, 0)::bigint AS queued, coalesce(u.running, 0)::bigint AS running,
       CASE WHEN a.tenant = '*'
            THEN (SELECT count(*) FROM sessions WHERE tenant IS NULL)
            ELSE (SELECT count(*) FROM sessions WHERE tenant = a.tenant)
       END::bigint AS sessions
FROM admission_limits a
LEFT JOIN LATERAL (
    SELECT sum(queued_turns) AS queued, count(*) AS running
    FROM sessions
    WHERE queued_turns > 0
      AND coalesce(tenant, '') = CASE WHEN a.tenant = '*' THEN '' ELSE a.tenant END
) u ON true
ORDER BY a.tenant = '*' DESC, a.tenant

-- name: admission_backlog
SELECT coalesce(sum(queued_turns), 0)::bigint AS backlog FROM sessions WHERE queued_turns > 0

-- name: admission_effective_for_session
-- admission_effective for the tenant of session %(session_id)s. A session's
-- tenant never changes, so this needs no lock and may go out in the same round
-- trip as the session's lock (the batch and single enqueue's plan).
SELECT coalesce(t.max_queued, d.max_queued) AS max_queued,
       coalesce(t.max_running, d.max_running) AS max_running,
       coalesce(t.max_session_queue, d.max_session_queue) AS max_session_queue,
       d.global_backlog,
       coalesce(t.max_sessions, d.max_sessions) AS max_sessions
FROM admission_limits d
LEFT JOIN admission_limits t ON t.tenant = (SELECT tenant FROM sessions WHERE id = %(session_id)s)
WHERE d.tenant = '*'
