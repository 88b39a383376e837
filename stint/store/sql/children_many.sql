-- name: children_spawn_many
-- Under the parent's lease: start several child sessions (ctx.spawn_many) in
-- one statement, one spawn step each (%(step_keys)s, %(digests)s and
-- %(inputs)s, a JSON array, in the same order), exactly as that many
-- children_spawn statements would, one commit instead of N. The limits hold
-- for the batch as a whole (admission_limits' max_depth; max_fanout: the
-- children this parent turn has plus the batch; max_sessions: the sessions
-- the tenant holds plus the batch; the tenant's row, else '*'):
-- over either, nothing is written but the fence's touch of the parent row, and
-- the answer says which limit. Otherwise it creates the children (the parent's
-- tenant, %(pin)s, its parent and depth) ready with their first turns queued,
-- links them in children, records their spawn steps committed with their ids,
-- appends one child.started per child to the parent's log and wakes a claimer.
-- A cancel or interrupt already asked of this turn refuses the whole batch
-- first, as in children_spawn (refused = 'stopped', the request comes back).
-- Safe under READ COMMITTED: parent locks the parent row (under the fence)
-- and reads its newest version, so a control committed while this statement
-- waited for the row (or after its snapshot) is seen, and none can commit
-- after it until this transaction ends (controls lock the row first); the
-- fence is log_bump's UPDATE of that row and every write hangs off it; the
-- parent's tenant and depth never change; the fan-out count reads children of
-- this parent turn, which only this lease holder adds, one statement after
-- another; the session count (max_sessions: the tenant's sessions plus the
-- batch) is read after children_lock_sessions, this statement's prelude, took
-- the tenant's sessions lock in this transaction (lock first, as
-- children_spawn); the inserts are new rows with fresh keys (a step key
-- already recorded fails the whole statement on the primary key: never a
-- second child).
WITH parent AS MATERIALIZED (
    SELECT id, tenant, depth, control, control_turn_id, control_reason
    FROM sessions
    WHERE /*include:lease_fence*/
    FOR NO KEY UPDATE
), limits AS (
    SELECT coalesce(t.max_depth, d.max_depth) AS max_depth,
           coalesce(t.max_fanout, d.max_fanout) AS max_fanout,
           coalesce(t.max_sessions, d.max_sessions) AS max_sessions
    FROM parent
    JOIN admission_limits d ON d.tenant = '*'
    LEFT JOIN admission_limits t ON t.tenant = parent.tenant
), asked AS MATERIALIZED (
    SELECT k.ord, k.step_key, k.digest, i.input,
           gen_random_uuid() AS child_id, gen_random_uuid() AS child_turn_id
    FROM unnest(%(step_keys)s::text[], %(digests)s::text[])
             WITH ORDINALITY AS k (step_key, digest, ord)
    JOIN jsonb_array_elements(%(inputs)s::jsonb) WITH ORDINALITY AS i (input, ord)
      ON i.ord = k.ord
), verdict AS MATERIALIZED (
    SELECT CASE WHEN parent.control_turn_id = %(turn_id)s
                THEN 'stopped'
                WHEN limits.max_depth IS NOT NULL AND parent.depth + 1 > limits.max_depth
                THEN 'max_depth'
                WHEN limits.max_fanout IS NOT NULL
                     AND (SELECT count(*) FROM children c
                          WHERE c.parent_id = parent.id AND c.parent_turn_id = %(turn_id)s)
                         + (SELECT count(*) FROM asked) > limits.max_fanout
                THEN 'max_fanout'
                WHEN limits.max_sessions IS NOT NULL
                     AND (SELECT count(*) FROM sessions s WHERE s.tenant = parent.tenant)
                         + (SELECT count(*) FROM sessions s
                            WHERE parent.tenant IS NULL AND s.tenant IS NULL)
                         + (SELECT count(*) FROM asked) > limits.max_sessions
                THEN 'max_sessions'
           END AS refused,
           limits.max_depth, limits.max_fanout, limits.max_sessions,
           parent.depth + 1 AS depth, parent.tenant, parent.control, parent.control_reason
    FROM parent, limits
), go AS (
    SELECT asked.*, verdict.depth, verdict.tenant
    FROM verdict, asked
    WHERE verdict.refused IS NULL
), log_new AS (
    SELECT %(session_id)s::uuid AS session_id, %(turn_id)s::uuid AS turn_id,
           'child.started'::text AS kind,
           jsonb_build_object('step_key', go.step_key, 'child_id', go.child_id,
                              'child_turn_id', go.child_turn_id) AS payload,
           %(epoch)s::bigint AS lease_epoch, go.ord
    FROM go
), /*include:log_bump_fenced*/, child AS (
    INSERT INTO sessions (id, tenant, pin, parent_id, depth, status, ready_at, queued_turns,
                          last_turn_seq)
    SELECT go.child_id, go.tenant, %(pin)s::text, %(session_id)s, go.depth, 'ready', now(), 1, 1
    FROM go, log_bump
    RETURNING id
), child_turn AS (
    INSERT INTO turns (id, session_id, seq, idempotency_key, input, timeout_seconds)
    SELECT go.child_turn_id, child.id, 1, 'spawn', go.input, %(timeout_seconds)s::real
    FROM go JOIN child ON child.id = go.child_id
), linked AS (
    INSERT INTO children (parent_id, parent_turn_id, step_key, child_id, child_turn_id,
                          on_cancel)
    SELECT %(session_id)s, %(turn_id)s, go.step_key, child.id, go.child_turn_id,
           %(on_cancel)s::text
    FROM go JOIN child ON child.id = go.child_id
), recorded AS (
    INSERT INTO steps (session_id, turn_id, step_key, kind, status, request_digest, result,
                       lease_epoch, finished_at)
    SELECT %(session_id)s, %(turn_id)s, go.step_key, 'spawn', 'committed', go.digest,
           jsonb_build_object('child_id', go.child_id, 'child_turn_id', go.child_turn_id),
           %(epoch)s, clock_timestamp()
    FROM go, log_bump
), /*include:log_append*/
SELECT verdict.refused, verdict.max_depth, verdict.max_fanout, verdict.max_sessions,
       verdict.tenant,
       CASE WHEN verdict.refused = 'stopped' THEN verdict.control END AS control,
       CASE WHEN verdict.refused = 'stopped' THEN verdict.control_reason END AS control_reason,
       (SELECT array_agg(go.child_id ORDER BY go.ord) FROM go) AS child_ids,
       (SELECT array_agg(go.child_turn_id ORDER BY go.ord) FROM go) AS child_turn_ids,
       CASE WHEN verdict.refused IS NULL THEN pg_notify(%(work_channel)s, '') IS NULL END
           AS notified
FROM verdict, log_bump
