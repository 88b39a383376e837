-- name: turns_find_by_key
SELECT id, seq, input = %(input)s::jsonb AS same_input
FROM turns
WHERE session_id = %(session_id)s AND idempotency_key = %(idempotency_key)s

-- name: turns_insert
-- Runs after sessions_lock_for_enqueue in the same transaction.
WITH added AS (
    INSERT INTO turns (session_id, seq, idempotency_key, input, timeout_seconds)
    VALUES (%(session_id)s, %(seq)s, %(idempotency_key)s, %(input)s, %(timeout_seconds)s)
    RETURNING id, seq
), counted AS (
    UPDATE sessions
    SET last_turn_seq = %(seq)s,
        queued_turns  = queued_turns + 1,
        status        = CASE WHEN status = 'idle' THEN 'ready' ELSE status END,
        ready_at      = CASE WHEN status = 'idle' THEN now() ELSE ready_at END,
        updated_at    = now()
    WHERE id = %(session_id)s
)
SELECT id, seq, pg_notify(%(work_channel)s, '') IS NULL AS notified FROM added

-- name: turns_begin
-- Under the lease: start the session's oldest unfinished turn (a running one is
-- a retry after a lost lease) and announce it. Returns fenced = false when the
-- lease is no longer ours, and no turn when the queue is empty.
WITH fence AS (
    SELECT claimed_at
    FROM sessions
    WHERE id = %(session_id)s AND lease_owner = %(owner)s AND lease_epoch = %(epoch)s
    FOR UPDATE
), next_turn AS (
    SELECT t.id
    FROM turns t
    WHERE t.session_id = %(session_id)s
      AND t.status IN ('queued', 'running')
      AND EXISTS (SELECT FROM fence)
    ORDER BY t.seq
    LIMIT 1
), started AS (
    UPDATE turns t
    SET status           = 'running',
        attempts         = t.attempts + 1,
        first_claimed_at = coalesce(t.first_claimed_at, greatest(fence.claimed_at, t.enqueued_at)),
        started_at       = coalesce(t.started_at, now()),
        worker_id        = %(owner)s
    FROM next_turn, fence
    WHERE t.id = next_turn.id
    RETURNING t.id, t.seq, t.input, t.attempts, t.timeout_seconds
), log_new AS (
    SELECT started.id AS turn_id, 'turn.started'::text AS kind,
           jsonb_build_object('attempt', started.attempts, 'worker', %(owner)s::text) AS payload,
           %(epoch)s::bigint AS lease_epoch, 1::bigint AS ord
    FROM started
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/, updated_at = now()
    WHERE id = %(session_id)s AND EXISTS (SELECT FROM started)
    RETURNING last_event_seq
), /*include:log_append*/
SELECT EXISTS (SELECT FROM fence) AS fenced, started.id AS turn_id, started.seq,
       started.input, started.attempts, started.timeout_seconds
FROM (SELECT) AS one
LEFT JOIN started ON true

-- name: turns_finish
-- Record a turn's terminal state and its terminal event; then either keep the
-- lease (more turns queued, caller may continue) or release the session.
WITH /*include:log_new_from_params*/, log_bump AS (
    UPDATE sessions s
    SET /*include:log_reserve*/,
        queued_turns     = s.queued_turns - 1,
        status           = CASE
                               WHEN s.queued_turns > 1 AND NOT %(release)s THEN s.status
                               WHEN s.queued_turns > 1 THEN 'ready'
                               ELSE 'idle'
                           END,
        ready_at         = CASE WHEN s.queued_turns > 1 THEN now() END,
        lease_owner      = CASE WHEN s.queued_turns > 1 AND NOT %(release)s THEN s.lease_owner END,
        lease_expires_at = CASE WHEN s.queued_turns > 1 AND NOT %(release)s THEN s.lease_expires_at END,
        control              = CASE WHEN s.control_turn_id = %(turn_id)s THEN NULL ELSE s.control END,
        control_reason       = CASE WHEN s.control_turn_id = %(turn_id)s THEN NULL
                                    ELSE s.control_reason END,
        control_requested_at = CASE WHEN s.control_turn_id = %(turn_id)s THEN NULL
                                    ELSE s.control_requested_at END,
        control_turn_id      = CASE WHEN s.control_turn_id = %(turn_id)s THEN NULL
                                    ELSE s.control_turn_id END,
        updated_at       = now()
    WHERE s.id = %(session_id)s AND s.lease_owner = %(owner)s AND s.lease_epoch = %(epoch)s
      AND EXISTS (SELECT FROM turns t WHERE t.id = %(turn_id)s AND t.status = 'running')
    RETURNING s.last_event_seq, s.queued_turns, s.lease_owner IS NOT NULL AS still_held
), finished AS (
    UPDATE turns
    SET status = %(status)s, output = %(output)s, error = %(error)s, reason = %(reason)s,
        finished_at = now()
    WHERE id = %(turn_id)s AND EXISTS (SELECT FROM log_bump)
), /*include:log_append*/
SELECT queued_turns, still_held FROM log_bump

-- name: turns_park
-- Under the lease: the turn waits for an answer. Record the question as a
-- started 'answer' step, park the turn and the session, release the lease
-- (the slot is free at once) and announce approval.requested. A cancel or
-- interrupt already requested for this turn wins: nothing is parked and the
-- request comes back, so the worker ends the turn instead of losing it.
-- ``held`` locks the row and reads its latest version (a control committed
-- while this statement waited is seen), so the choice is made on one version.
WITH held AS (
    SELECT id, control, control_turn_id, control_reason
    FROM sessions
    WHERE id = %(session_id)s AND lease_owner = %(owner)s AND lease_epoch = %(epoch)s
    FOR UPDATE
), log_new AS (
    SELECT %(turn_id)s::uuid AS turn_id, 'approval.requested'::text AS kind,
           jsonb_build_object('step_key', %(step_key)s::text, 'question', %(question)s::jsonb)
               AS payload,
           %(epoch)s::bigint AS lease_epoch, 1::bigint AS ord
    FROM held
    WHERE held.control_turn_id IS DISTINCT FROM %(turn_id)s
      AND EXISTS (SELECT FROM turns t WHERE t.id = %(turn_id)s AND t.status = 'running')
), log_bump AS (
    UPDATE sessions s
    SET /*include:log_reserve*/,
        status           = 'parked',
        ready_at         = NULL,
        lease_owner      = NULL,
        lease_expires_at = NULL,
        updated_at       = now()
    FROM held
    WHERE s.id = held.id AND EXISTS (SELECT FROM log_new)
    RETURNING s.last_event_seq
), asked AS (
    INSERT INTO steps (session_id, turn_id, step_key, kind, status, request_digest, lease_epoch)
    SELECT %(session_id)s, %(turn_id)s, %(step_key)s, 'answer', 'started', %(digest)s, %(epoch)s
    FROM log_bump
    ON CONFLICT (session_id, turn_id, step_key) DO NOTHING
), parked AS (
    UPDATE turns SET status = 'parked' WHERE id = %(turn_id)s AND EXISTS (SELECT FROM log_bump)
), /*include:log_append*/
SELECT EXISTS (SELECT FROM log_bump) AS parked, held.control, held.control_reason
FROM held
WHERE EXISTS (SELECT FROM log_bump) OR held.control_turn_id = %(turn_id)s

-- name: turn_columns
-- Fragment: a turn as a client sees it, from turns t.
t.id, t.session_id, t.seq, t.idempotency_key, t.status, t.input, t.output, t.error, t.reason,
t.attempts, t.timeout_seconds, t.enqueued_at, t.started_at, t.finished_at

-- name: turns_get
-- One turn of one session; with %(tenant)s set, only if the session is that tenant's.
SELECT /*include:turn_columns*/
FROM turns t
JOIN sessions s ON s.id = t.session_id
WHERE t.id = %(turn_id)s AND t.session_id = %(session_id)s
  AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s)

-- name: turns_list
-- A session's turns in order, after seq %(after_seq)s (keyset paging).
SELECT /*include:turn_columns*/
FROM turns t
JOIN sessions s ON s.id = t.session_id
WHERE t.session_id = %(session_id)s AND t.seq > %(after_seq)s
  AND (%(tenant)s::text IS NULL OR s.tenant = %(tenant)s)
ORDER BY t.seq
LIMIT %(limit)s
