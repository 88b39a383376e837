-- name: controls_lock_session
-- Serialise controls with enqueues and workers' writes; is a live lease held?
-- With %(tenant)s set, another tenant's session is not found (the API's scope).
SELECT status, lease_owner, lease_expires_at > now() AS lease_live
FROM sessions
WHERE id = %(session_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
FOR UPDATE

-- name: controls_end_queued
-- End queued turns (all of them, or %(turn_id)s) directly as %(status)s
-- (a cancel; or an interrupt's cascade to a child's spawned turn that is
-- queued or set aside on a wait): each gets its terminal event %(kind)s,
-- numbered right after the log under the session lock.
-- Safe under READ COMMITTED: runs after controls_lock_session in the same
-- transaction, so its snapshot holds everything committed on the session,
-- and no turn of it changes until this transaction ends. A session left
-- ready (turns remain) wakes a claimer.
WITH ended AS (
    UPDATE turns
    SET status = %(status)s, finished_at = now(), reason = %(reason)s
    WHERE session_id = %(session_id)s AND status = 'queued'
      AND (%(turn_id)s::uuid IS NULL OR id = %(turn_id)s::uuid)
    RETURNING id, seq
), log_new AS (
    SELECT %(session_id)s::uuid AS session_id, id AS turn_id, %(kind)s::text AS kind,
           jsonb_build_object('reason', %(reason)s::text, 'was', 'queued',
                              'actor', %(actor)s::jsonb) AS payload,
           NULL::bigint AS lease_epoch, row_number() OVER (ORDER BY seq) AS ord
    FROM ended
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/,
        queued_turns   = queued_turns - (SELECT count(*) FROM ended),
        status         = CASE WHEN status = 'ready'
                                   AND queued_turns = (SELECT count(*) FROM ended)
                              THEN 'idle' ELSE status END,
        ready_at       = CASE WHEN status = 'ready'
                                   AND queued_turns = (SELECT count(*) FROM ended)
                              THEN NULL ELSE ready_at END,
        updated_at     = now()
    WHERE id = %(session_id)s AND EXISTS (SELECT FROM ended)
    RETURNING id, last_event_seq, status
), /*include:log_append*/
SELECT id,
       CASE WHEN (SELECT status FROM log_bump) = 'ready'
            THEN pg_notify(%(work_channel)s, '') IS NULL END AS notified
FROM ended ORDER BY seq

-- name: controls_active_turn
SELECT id, status
FROM turns
WHERE session_id = %(session_id)s AND status IN ('running', 'parked')
  AND (%(turn_id)s::uuid IS NULL OR id = %(turn_id)s::uuid)

-- name: controls_request
-- Ask the lease holder to stop the running turn; the NOTIFY reaches it at
-- once, the flag reaches it at its next lease renewal if the NOTIFY is missed.
-- The request is logged (control.requested, with who asked): the worker's
-- terminal event follows it.
-- Safe under READ COMMITTED: one UPDATE of one row, after controls_lock_session.
WITH log_new AS (
    SELECT %(session_id)s::uuid AS session_id, %(turn_id)s::uuid AS turn_id,
           'control.requested'::text AS kind,
           jsonb_build_object('action', %(action)s::text, 'reason', %(reason)s::text,
                              'actor', %(actor)s::jsonb) AS payload,
           NULL::bigint AS lease_epoch, 1::bigint AS ord
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/,
        control = %(action)s, control_turn_id = %(turn_id)s, control_reason = %(reason)s,
        control_requested_at = clock_timestamp(), updated_at = now()
    WHERE id = %(session_id)s
    RETURNING id, last_event_seq
), /*include:log_append*/
SELECT pg_notify(%(control_channel)s, %(session_id)s::text) IS NULL FROM log_bump

-- name: controls_end_turn
-- End a parked turn, or a running one no live worker holds, in the database
-- alone. Bumping the epoch fences the previous owner, should it wake up.
-- Safe under READ COMMITTED: runs after controls_lock_session in the same
-- transaction (the lock is held before this snapshot is taken).
WITH ended AS (
    UPDATE turns
    SET status = %(status)s, finished_at = now(), reason = %(reason)s
    WHERE id = %(turn_id)s AND status IN ('running', 'parked')
    RETURNING id
), log_new AS (
    SELECT %(session_id)s::uuid AS session_id, ended.id AS turn_id, %(kind)s::text AS kind,
           jsonb_build_object('reason', %(reason)s::text, 'by', 'database',
                              'actor', %(actor)s::jsonb) AS payload,
           NULL::bigint AS lease_epoch, 1::bigint AS ord
    FROM ended
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/,
        queued_turns         = queued_turns - 1,
        status               = CASE WHEN queued_turns > 1 THEN 'ready' ELSE 'idle' END,
        ready_at             = CASE WHEN queued_turns > 1 THEN now() END,
        lease_epoch          = lease_epoch + CASE WHEN lease_owner IS NULL THEN 0 ELSE 1 END,
        lease_owner          = NULL,
        lease_expires_at     = NULL,
        control              = NULL,
        control_turn_id      = NULL,
        control_reason       = NULL,
        control_requested_at = NULL,
        updated_at           = now()
    WHERE id = %(session_id)s AND EXISTS (SELECT FROM ended)
    RETURNING id, last_event_seq, status
), /*include:log_append*/
SELECT ended.id, pg_notify(%(work_channel)s, '') IS NULL AS notified
FROM ended, log_bump

-- name: answers_record
-- Record the answer to a parked turn's question as its committed 'answer'
-- step, put the turn back in the queue and the session in ready: the turn
-- replays and continues past the question. Concurrent answers: one wins.
-- Safe under READ COMMITTED: runs after controls_lock_session in the same
-- transaction (the lock is held before this snapshot is taken), and the step's
-- update re-checks status = 'started' on its newest version.
WITH open_question AS (
    SELECT st.turn_id
    FROM steps st
    JOIN turns t ON t.id = st.turn_id
    WHERE st.session_id = %(session_id)s AND st.step_key = %(step_key)s
      AND st.kind = 'answer' AND st.status = 'started' AND t.status = 'parked'
), answered AS (
    UPDATE steps
    SET status = 'committed', result = %(answer)s, finished_at = clock_timestamp()
    FROM open_question
    WHERE steps.session_id = %(session_id)s AND steps.turn_id = open_question.turn_id
      AND steps.step_key = %(step_key)s AND steps.status = 'started'
    RETURNING steps.turn_id
), resumed AS (
    UPDATE turns SET status = 'queued'
    FROM answered
    WHERE turns.id = answered.turn_id
    RETURNING turns.id
), log_new AS (
    SELECT %(session_id)s::uuid AS session_id, resumed.id AS turn_id,
           'approval.answered'::text AS kind,
           jsonb_build_object('step_key', %(step_key)s::text, 'actor', %(actor)s::jsonb)
               AS payload,
           NULL::bigint AS lease_epoch, 1::bigint AS ord
    FROM resumed
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/, status = 'ready', ready_at = now(), updated_at = now()
    WHERE id = %(session_id)s AND status = 'parked' AND EXISTS (SELECT FROM resumed)
    RETURNING id, last_event_seq
), /*include:log_append*/
SELECT resumed.id, pg_notify(%(work_channel)s, '') IS NULL AS notified
FROM resumed, log_bump

-- name: controls_turn_of_session
-- The turn a `cancel --turn` names, only if it belongs to this session.
SELECT status FROM turns WHERE id = %(turn_id)s AND session_id = %(session_id)s

-- name: answers_find_committed
-- The recorded answer to this question, if any: a retry with the same value is
-- answered idempotently, another value is refused.
SELECT st.turn_id, st.result = %(answer)s::jsonb AS same_answer
FROM steps st
WHERE st.session_id = %(session_id)s AND st.step_key = %(step_key)s
  AND st.kind = 'answer' AND st.status = 'committed'
ORDER BY st.finished_at DESC
LIMIT 1
