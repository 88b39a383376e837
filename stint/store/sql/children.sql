-- name: children_lock_sessions
-- Spawn, part 1 of 2 (children_spawn's prelude, in the same transaction):
-- when the parent's tenant has a max_sessions limit, lock the parent's row
-- (under the fence), then the tenant's sessions lock (admission_lock_sessions'
-- key), so that children_spawn, whose snapshot is taken once both are held,
-- counts every session created under that lock before (lock first). The row
-- before the advisory lock, as the enqueue takes its sessions' locks before a
-- new session's and the scheduler its targets' before a new session's.
-- Without the limit it locks nothing (children_spawn's fence locks the row).
-- Safe under READ COMMITTED: FOR UPDATE re-checks the fence on the row's
-- newest version; it writes nothing, and decides nothing but whether to lock.
WITH parent AS MATERIALIZED (
    SELECT tenant
    FROM sessions
    WHERE /*include:lease_fence*/
      AND EXISTS (SELECT FROM admission_limits d
                  LEFT JOIN admission_limits t ON t.tenant = sessions.tenant
                  WHERE d.tenant = '*' AND coalesce(t.max_sessions, d.max_sessions) IS NOT NULL)
    FOR UPDATE
)
SELECT pg_advisory_xact_lock(hashtext('stint.admission:' || current_schema()),
                             hashtext('sessions:' || coalesce(parent.tenant, '')))::text
       AS sessions_lock
FROM parent

-- name: children_spawn
-- Under the parent's lease: start a child session (ctx.spawn) as one step.
-- Unless a limit refuses it (admission_limits' max_depth: how deep a tree
-- may grow; max_fanout: children per parent turn; max_sessions: sessions the
-- tenant holds; the tenant's row, else '*'), it creates the child session
-- (the parent's tenant, %(pin)s, its parent and depth) ready with its first
-- turn queued, links it in children, records the spawn step committed with
-- the child's ids, appends child.started to the parent's log and wakes a
-- claimer. A refusal writes nothing but the fence's touch of the parent row
-- and says which limit. A cancel or interrupt already asked of this turn
-- (the parent row's control for %(turn_id)s) refuses the child first, and the
-- request comes back (refused = 'stopped', with control and control_reason),
-- so the worker ends the turn as asked: once the control has committed, the
-- turn it stops never starts another child (it could not be cascaded to).
-- Safe under READ COMMITTED: parent locks the parent row (under the fence)
-- and reads its newest version, so a control committed while this statement
-- waited for the row (or after its snapshot) is seen, and none can commit
-- after it until this transaction ends (controls lock the row first); the
-- fence is log_bump's UPDATE of that row and every write hangs off it; the
-- parent's tenant and depth never change; the fan-out count reads children
-- of this parent turn, which only this lease holder adds, one statement after
-- another; the session count is read after children_lock_sessions took the
-- tenant's sessions lock in this transaction (lock first: every creator of
-- the tenant's sessions under a max_sessions limit takes it); the inserts
-- are new rows with fresh keys.
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
), verdict AS MATERIALIZED (
    SELECT CASE WHEN parent.control_turn_id = %(turn_id)s
                THEN 'stopped'
                WHEN limits.max_depth IS NOT NULL AND parent.depth + 1 > limits.max_depth
                THEN 'max_depth'
                WHEN limits.max_fanout IS NOT NULL
                     AND (SELECT count(*) FROM children c
                          WHERE c.parent_id = parent.id AND c.parent_turn_id = %(turn_id)s)
                         >= limits.max_fanout
                THEN 'max_fanout'
                WHEN limits.max_sessions IS NOT NULL
                     AND (SELECT count(*) FROM sessions s WHERE s.tenant = parent.tenant)
                         + (SELECT count(*) FROM sessions s
                            WHERE parent.tenant IS NULL AND s.tenant IS NULL)
                         >= limits.max_sessions
                THEN 'max_sessions'
           END AS refused,
           limits.max_depth, limits.max_fanout, limits.max_sessions,
           parent.depth + 1 AS depth, parent.tenant, parent.control, parent.control_reason,
           gen_random_uuid() AS child_id, gen_random_uuid() AS child_turn_id
    FROM parent, limits
), go AS (
    SELECT * FROM verdict WHERE refused IS NULL
), log_new AS (
    SELECT %(session_id)s::uuid AS session_id, %(turn_id)s::uuid AS turn_id,
           'child.started'::text AS kind,
           jsonb_build_object('step_key', %(step_key)s::text, 'child_id', go.child_id,
                              'child_turn_id', go.child_turn_id) AS payload,
           %(epoch)s::bigint AS lease_epoch, 1::bigint AS ord
    FROM go
), /*include:log_bump_fenced*/, child AS (
    INSERT INTO sessions (id, tenant, pin, parent_id, depth, status, ready_at, queued_turns,
                          last_turn_seq)
    SELECT go.child_id, go.tenant, %(pin)s::text, %(session_id)s, go.depth, 'ready', now(), 1, 1
    FROM go, log_bump
    RETURNING id
), child_turn AS (
    INSERT INTO turns (id, session_id, seq, idempotency_key, input, timeout_seconds)
    SELECT go.child_turn_id, child.id, 1, 'spawn', %(input)s, %(timeout_seconds)s::real
    FROM go JOIN child ON child.id = go.child_id
), linked AS (
    INSERT INTO children (parent_id, parent_turn_id, step_key, child_id, child_turn_id,
                          on_cancel)
    SELECT %(session_id)s, %(turn_id)s, %(step_key)s, child.id, go.child_turn_id,
           %(on_cancel)s::text
    FROM go JOIN child ON child.id = go.child_id
), recorded AS (
    INSERT INTO steps (session_id, turn_id, step_key, kind, status, request_digest, result,
                       lease_epoch, finished_at)
    SELECT %(session_id)s, %(turn_id)s, %(step_key)s, 'spawn', 'committed', %(digest)s,
           jsonb_build_object('child_id', go.child_id, 'child_turn_id', go.child_turn_id),
           %(epoch)s, clock_timestamp()
    FROM go, log_bump
), /*include:log_append*/
SELECT verdict.refused, verdict.max_depth, verdict.max_fanout, verdict.max_sessions,
       verdict.tenant,
       CASE WHEN verdict.refused = 'stopped' THEN verdict.control END AS control,
       CASE WHEN verdict.refused = 'stopped' THEN verdict.control_reason END AS control_reason,
       CASE WHEN verdict.refused IS NULL THEN verdict.child_id END AS child_id,
       CASE WHEN verdict.refused IS NULL THEN verdict.child_turn_id END AS child_turn_id,
       CASE WHEN verdict.refused IS NULL THEN pg_notify(%(work_channel)s, '') IS NULL END
           AS notified
FROM verdict, log_bump

-- name: children_take_ended
-- Report, part 1 of 3 (one transaction): take one child whose turn ended and
-- whose end its parent has not been told (%(child_id)s, or any), locked so
-- that no other reporter takes it. Its parent's row is locked next
-- (children_lock_parent), then children_report decides with a snapshot
-- taken once both locks are held (lock first). Nothing locks a parent's
-- session before a children row, so the order cannot deadlock.
SELECT c.parent_id, c.child_id
FROM children c
WHERE c.reported_at IS NULL
  AND (%(child_id)s::uuid IS NULL OR c.child_id = %(child_id)s::uuid)
  AND EXISTS (SELECT FROM turns t
              WHERE t.id = c.child_turn_id
                AND t.status IN ('succeeded', 'failed', 'cancelled', 'interrupted'))
LIMIT 1
FOR UPDATE OF c SKIP LOCKED

-- name: children_lock_parent
-- Report, part 2 of 3: the parent's row, so that its lease holder cannot set
-- a turn aside, nor settle a wait, until this report commits.
SELECT id FROM sessions WHERE id = %(parent_id)s FOR UPDATE

-- name: children_report
-- Report, part 3 of 3: record how the child's turn ended on its children
-- row, append child.finished to the parent's log, and wake the parent when
-- its set-aside turn waits for children and this end is what it waited for
-- (any of them; or the last of all of them).
-- Safe under READ COMMITTED: lock first: the children row and the parent's
-- row were locked by the two statements before, in this transaction, so this
-- snapshot holds every wait the parent recorded and every other report, and
-- neither can change until the commit; the child's turn has ended and stays so.
WITH ended AS (
    SELECT c.parent_id, c.parent_turn_id, c.step_key, c.child_id, c.child_turn_id,
           t.status, t.output, t.error
    FROM children c
    JOIN turns t ON t.id = c.child_turn_id
    WHERE c.child_id = %(child_id)s AND c.reported_at IS NULL
), reported AS (
    UPDATE children c
    SET status = ended.status, output = ended.output, error = ended.error,
        reported_at = clock_timestamp()
    FROM ended
    WHERE c.child_id = ended.child_id AND c.reported_at IS NULL
    RETURNING c.child_id
), waiting AS (
    SELECT FROM waits w
    JOIN steps st ON st.session_id = w.session_id AND st.turn_id = w.turn_id
                 AND st.step_key = w.step_key
    JOIN ended ON ended.parent_id = w.session_id AND ended.child_id = ANY (w.children)
    WHERE w.kind = 'children' AND st.status = 'started'
      AND (NOT w.wait_all
           OR (SELECT count(*) FROM children k
               WHERE k.parent_id = w.session_id AND k.child_id = ANY (w.children)
                 AND k.reported_at IS NOT NULL) + 1 >= cardinality(w.children))
), log_new AS (
    SELECT ended.parent_id AS session_id, NULL::uuid AS turn_id,
           'child.finished'::text AS kind,
           jsonb_build_object('child_id', ended.child_id, 'child_turn_id', ended.child_turn_id,
                              'parent_turn_id', ended.parent_turn_id,
                              'step_key', ended.step_key, 'status', ended.status) AS payload,
           NULL::bigint AS lease_epoch, 1::bigint AS ord
    FROM ended
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/,
        ready_at   = CASE WHEN sessions.status = 'ready' AND EXISTS (SELECT FROM waiting)
                          THEN least(sessions.ready_at, now()) ELSE sessions.ready_at END,
        updated_at = now()
    FROM ended
    WHERE sessions.id = ended.parent_id AND EXISTS (SELECT FROM reported)
    RETURNING sessions.id, sessions.last_event_seq, sessions.status, sessions.ready_at
), /*include:log_append*/
SELECT log_bump.id AS parent_id,
       CASE WHEN log_bump.status = 'ready' AND log_bump.ready_at <= now()
            THEN pg_notify(%(work_channel)s, '') IS NULL END AS notified
FROM log_bump

-- name: children_cascading
-- The unfinished children of %(turn_ids)s (turns of %(session_id)s being
-- cancelled) spawned with on_cancel = 'cascade': the cancel goes on to them.
SELECT c.child_id
FROM children c
JOIN turns t ON t.id = c.child_turn_id
WHERE c.parent_id = %(session_id)s AND c.parent_turn_id = ANY (%(turn_ids)s::uuid[])
  AND c.on_cancel = 'cascade'
  AND t.status IN ('queued', 'running', 'parked')
ORDER BY c.child_id

-- name: children_interrupting
-- The children an interrupt of %(session_id)s's turn goes on to: those
-- spawned by %(turn_id)s (or, when NULL, by any unfinished turn of the
-- session: the running, parked or set-aside one) with on_cancel = 'cascade'
-- whose spawned turn is unfinished. Read inside the control's transaction,
-- after the session's lock and before the control ends anything; each child
-- is then locked and its turn re-read before it is ended (a child that ended
-- meanwhile is left as it ended).
SELECT c.child_id, c.child_turn_id
FROM children c
JOIN turns p ON p.id = c.parent_turn_id
JOIN turns t ON t.id = c.child_turn_id
WHERE c.parent_id = %(session_id)s
  AND (%(turn_id)s::uuid IS NULL OR c.parent_turn_id = %(turn_id)s::uuid)
  AND p.status IN ('queued', 'running', 'parked')
  AND c.on_cancel = 'cascade'
  AND t.status IN ('queued', 'running', 'parked')
ORDER BY c.child_id

-- name: children_list
-- A session's children, oldest first, with how each one's spawned turn
-- ended once reported; with %(tenant)s set, only that tenant's session's.
SELECT c.child_id, c.parent_turn_id, c.step_key, c.child_turn_id, c.on_cancel, c.created_at,
       coalesce(c.status, t.status) AS status, c.reported_at
FROM children c
JOIN sessions s ON s.id = c.parent_id
LEFT JOIN turns t ON t.id = c.child_turn_id
WHERE c.parent_id = %(session_id)s
  AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s)
ORDER BY c.created_at, c.child_id

-- name: children_tree
-- The session's descendants (its children, theirs ...), level by level and
-- oldest first, at most %(limit)s of them: each with its parent, policy and
-- the status of the turn it was spawned with (stint show draws the tree).
WITH RECURSIVE tree AS (
    SELECT c.parent_id, c.child_id, c.child_turn_id, c.on_cancel, c.created_at, 1 AS level
    FROM children c
    WHERE c.parent_id = %(session_id)s
    UNION ALL
    SELECT c.parent_id, c.child_id, c.child_turn_id, c.on_cancel, c.created_at, tree.level + 1
    FROM children c
    JOIN tree ON c.parent_id = tree.child_id
    WHERE tree.level < 64
)
SELECT tree.parent_id, tree.child_id, t.status, tree.on_cancel, tree.level
FROM tree
LEFT JOIN turns t ON t.id = tree.child_turn_id
ORDER BY tree.level, tree.created_at, tree.child_id
LIMIT %(limit)s
