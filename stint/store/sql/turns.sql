-- name: turns_find_by_key
-- A retry is the same request only if everything that matters matches: the
-- input, the timeout and the busy strategy (rows from before 0012 have no
-- busy recorded: any matches).
SELECT id, seq,
       input = %(input)s::jsonb
       AND timeout_seconds IS NOT DISTINCT FROM %(timeout_seconds)s::real
       AND (busy IS NULL OR busy = %(busy)s) AS same_input
FROM turns
WHERE session_id = %(session_id)s AND idempotency_key = %(idempotency_key)s

-- name: turns_insert
-- Runs after sessions_lock_for_enqueue in the same transaction. Safe under
-- READ COMMITTED: the session row was locked by that earlier statement, so
-- this one's snapshot holds every change to the session committed before,
-- and nothing can change it until this transaction ends (so was_idle reads
-- the status the UPDATE changes).
-- Only a session this turn makes ready is notified, naming it (and its pin) so
-- one worker claims for it (stint/worker/roster.py). A ready one was notified
-- when it became ready; a running one's holder starts the turn when its turn
-- finishes (turns_finish reads queued_turns under the same row lock); a parked
-- one is notified when it resumes.
WITH was_idle AS (
    SELECT pin FROM sessions WHERE id = %(session_id)s AND status = 'idle'
), added AS (
    INSERT INTO turns (session_id, seq, idempotency_key, input, timeout_seconds, traceparent,
                       busy)
    VALUES (%(session_id)s, %(seq)s, %(idempotency_key)s, %(input)s, %(timeout_seconds)s,
            %(traceparent)s, %(busy)s)
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
SELECT id, seq,
       (SELECT pg_notify(%(work_channel)s, %(session_id)s::text || coalesce(' ' || pin, ''))
        FROM was_idle) IS NULL AS notified
FROM added

-- name: turns_insert_first
-- The first turn of each session a batch enqueue created in this transaction
-- (sessions_create_many), one per element of %(turns)s, and one NOTIFY for
-- them all: naming the session (and its pin) when there is one, so one worker
-- claims for it (stint/worker/roster.py), else empty, waking every worker.
-- Safe under READ COMMITTED: those sessions are not committed yet, so no other
-- transaction can see, lock or change them; each gets seq 1 and one queued turn.
WITH given AS (
    SELECT *
    FROM jsonb_to_recordset(%(turns)s)
         AS r(session_id uuid, idempotency_key text, input jsonb, timeout_seconds real,
              traceparent text, busy text)
), added AS (
    INSERT INTO turns (session_id, seq, idempotency_key, input, timeout_seconds, traceparent,
                       busy)
    SELECT session_id, 1, idempotency_key, input, timeout_seconds, traceparent, busy
    FROM given
    RETURNING session_id, id, seq
), counted AS (
    UPDATE sessions s
    SET last_turn_seq = 1,
        queued_turns  = s.queued_turns + 1,
        status        = CASE WHEN s.status = 'idle' THEN 'ready' ELSE s.status END,
        ready_at      = CASE WHEN s.status = 'idle' THEN now() ELSE s.ready_at END,
        updated_at    = now()
    FROM given
    WHERE s.id = given.session_id
)
SELECT added.session_id, added.id, added.seq
FROM added, (
    SELECT pg_notify(%(work_channel)s,
                     CASE WHEN count(*) = 1 THEN min(s.id::text) || coalesce(' ' || min(s.pin), '')
                          ELSE '' END)
    FROM given JOIN sessions s ON s.id = given.session_id
) AS notified

-- name: turns_finish
-- Under the lease: record a turn's terminal state and terminal events, then
-- find the slot its next work in the same statement. The session keeps its
-- lease when more turns are queued and %(release)s is false, and its next
-- turn starts at once; otherwise it is released (ready or idle) and, when
-- %(claim_next)s, one other claimable session is claimed and its next turn
-- started. A finished slot is busy again after this one round trip.
--
-- Safe under READ COMMITTED: locked waits for the session row (an enqueue or
-- a control may hold it) and then sees its newest version, but next_same
-- reads turns in the statement's snapshot, taken before that wait. If the row
-- changed in between (an enqueue committed while we waited: queued_turns > 1
-- at the newest version, the new turn invisible to the snapshot), keeping the
-- lease would hold a session whose next turn nobody starts. So the lease is
-- kept only when the locked version is the snapshot's (same xmin: every write
-- to a session's turns updates its row); otherwise the session is released
-- ready and a NOTIFY wakes a claimer (this worker's among them) for it.
-- The fence and every counter are read from the locked row; the finished
-- turn's own status cannot change under the fence.
WITH /*include:stamp*/, locked AS (
    SELECT id, queued_turns, xmin AS version
    FROM sessions
    WHERE /*include:lease_fence*/
      AND EXISTS (SELECT FROM turns t WHERE t.id = %(turn_id)s AND t.status = 'running')
    FOR UPDATE
), finishing AS (
    SELECT locked.id,
           locked.queued_turns > 1 AND NOT %(release)s
           AND EXISTS (SELECT FROM sessions s WHERE s.id = locked.id AND s.xmin = locked.version)
               AS keep
    FROM locked
), finished AS (
    UPDATE turns
    SET status = %(status)s, output = %(output)s, error = %(error)s, reason = %(reason)s,
        finished_at = (SELECT at FROM stamp)
    WHERE id = %(turn_id)s AND EXISTS (SELECT FROM finishing)
), next_same AS (
    SELECT t.id, %(epoch)s::bigint AS epoch
    FROM turns t, finishing
    WHERE finishing.keep AND t.session_id = %(session_id)s AND t.status = 'queued'
    ORDER BY t.seq
    LIMIT 1
), claim_gate AS (
    SELECT FROM finishing WHERE NOT finishing.keep AND %(claim_next)s
), /*include:claim_candidates*/,
starting AS (
    SELECT id, epoch FROM next_same UNION ALL SELECT id, epoch FROM chosen_turn
), /*include:start_turns*/,
log_new AS (
    SELECT %(session_id)s::uuid AS session_id, %(turn_id)s::uuid AS turn_id,
           e.item ->> 0 AS kind, e.item -> 1 AS payload,
           %(epoch)s::bigint AS lease_epoch, e.ord
    FROM finishing,
         jsonb_array_elements(%(events)s::jsonb) WITH ORDINALITY AS e (item, ord)
    UNION ALL
    SELECT started.session_id, started.id, 'turn.started',
           jsonb_build_object('attempt', started.attempts, 'worker', %(owner)s::text),
           started.epoch,
           CASE WHEN started.session_id = %(session_id)s
                THEN jsonb_array_length(%(events)s::jsonb) + 1 ELSE 1 END
    FROM started
), bump_finished AS (
    UPDATE sessions
    SET /*include:log_reserve*/,
        queued_turns         = queued_turns - 1,
        status               = CASE WHEN finishing.keep THEN status
                                    WHEN queued_turns > 1 THEN 'ready'
                                    ELSE 'idle' END,
        ready_at             = CASE WHEN queued_turns > 1 THEN now() END,
        lease_owner          = CASE WHEN finishing.keep THEN lease_owner END,
        lease_expires_at     = CASE WHEN finishing.keep THEN lease_expires_at END,
        control              = CASE WHEN control_turn_id = %(turn_id)s THEN NULL ELSE control END,
        control_reason       = CASE WHEN control_turn_id = %(turn_id)s THEN NULL
                                    ELSE control_reason END,
        control_requested_at = CASE WHEN control_turn_id = %(turn_id)s THEN NULL
                                    ELSE control_requested_at END,
        control_turn_id      = CASE WHEN control_turn_id = %(turn_id)s THEN NULL
                                    ELSE control_turn_id END,
        updated_at           = now()
    FROM finishing
    WHERE sessions.id = finishing.id
    RETURNING sessions.id, sessions.last_event_seq, sessions.queued_turns,
              sessions.lease_owner IS NOT NULL AS still_held, sessions.status,
              sessions.parent_id
), bump_claimed AS (
    UPDATE sessions
    SET /*include:log_reserve*/, /*include:claim_lease*/
    FROM chosen
    WHERE sessions.id = chosen.id
    RETURNING sessions.id, sessions.last_event_seq, sessions.lease_epoch
), log_bump AS (
    SELECT id, last_event_seq FROM bump_finished
    UNION ALL
    SELECT id, last_event_seq FROM bump_claimed
), /*include:log_append*/
SELECT bump_finished.queued_turns, bump_finished.still_held, bump_finished.parent_id,
       CASE WHEN bump_finished.status = 'ready' THEN pg_notify(%(work_channel)s, '') IS NULL END
           AS notified,
       coalesce(bump_claimed.id, started.session_id) AS next_session_id,
       coalesce(bump_claimed.lease_epoch, started.epoch) AS next_epoch,
       started.id AS next_turn_id, started.seq AS next_seq, started.input AS next_input,
       started.attempts AS next_attempts, started.timeout_seconds AS next_timeout_seconds,
       started.traceparent AS next_traceparent, started.queue_wait AS next_queue_wait
FROM bump_finished
LEFT JOIN bump_claimed ON true
LEFT JOIN started ON true

-- name: turns_park
-- Under the lease: the turn waits for an answer. Record the question as a
-- started 'answer' step, park the turn and the session, release the lease
-- (the slot is free at once) and announce approval.requested. A cancel or
-- interrupt already requested for this turn wins: nothing is parked and the
-- request comes back, so the worker ends the turn instead of losing it.
-- ``held`` locks the row and reads its latest version (a control committed
-- while this statement waited is seen), so the choice is made on one version.
-- Safe under READ COMMITTED: the fence and the control flags come from the
-- locked row; the one other read, the turn's status, cannot change under the
-- fence (only this lease holder, or controls_end_turn, which bumps the epoch).
WITH held AS (
    SELECT id, control, control_turn_id, control_reason
    FROM sessions
    WHERE /*include:lease_fence*/
    FOR UPDATE
), log_new AS (
    SELECT %(session_id)s::uuid AS session_id, %(turn_id)s::uuid AS turn_id,
           'approval.requested'::text AS kind,
           jsonb_build_object('step_key', %(step_key)s::text, 'question', %(question)s::jsonb)
               AS payload,
           %(epoch)s::bigint AS lease_epoch, 1::bigint AS ord
    FROM held
    WHERE held.control_turn_id IS DISTINCT FROM %(turn_id)s
      AND EXISTS (SELECT FROM turns t WHERE t.id = %(turn_id)s AND t.status = 'running')
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/,
        status           = 'parked',
        ready_at         = NULL,
        lease_owner      = NULL,
        lease_expires_at = NULL,
        updated_at       = now()
    FROM held
    WHERE sessions.id = held.id AND EXISTS (SELECT FROM log_new)
    RETURNING sessions.id, sessions.last_event_seq
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

-- name: turns_defer
-- Under the lease: the turn cannot get quota of %(scope)s for %(wait_seconds)s
-- seconds, longer than it may wait in its slot. It goes back to queued with
-- its committed steps kept; the session is released as ready with ready_at
-- at the not-before time, so no claim takes it before then (the claim reads
-- ready_at <= now()), and oldest-ready order puts it first in line after;
-- a turn.deferred event carries the scope, the not-before time and how long
-- the call had already waited in its slot (waited_s). A cancel
-- or interrupt already requested for this turn wins, as in turns_park.
-- Safe under READ COMMITTED as turns_park is; the requeue also re-checks the
-- turn's newest status, and the scope's counter is one UPDATE of its row.
WITH held AS (
    SELECT id, control, control_turn_id, control_reason
    FROM sessions
    WHERE /*include:lease_fence*/
    FOR UPDATE
), requeued AS (
    UPDATE turns t
    SET status = 'queued'
    FROM held
    WHERE t.id = %(turn_id)s AND t.status = 'running'
      AND held.control_turn_id IS DISTINCT FROM %(turn_id)s
    RETURNING t.id
), stamp AS MATERIALIZED (
    SELECT clock_timestamp() + make_interval(secs => %(wait_seconds)s) AS not_before
), log_new AS (
    SELECT %(session_id)s::uuid AS session_id, requeued.id AS turn_id,
           'turn.deferred'::text AS kind,
           jsonb_build_object('scope', %(scope)s::text, 'not_before', stamp.not_before,
                              'wait_s', %(wait_seconds)s::float8,
                              'waited_s', %(waited_seconds)s::float8, 'worker', %(owner)s::text)
               AS payload,
           %(epoch)s::bigint AS lease_epoch, 1::bigint AS ord
    FROM requeued, stamp
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/,
        status           = 'ready',
        ready_at         = stamp.not_before,
        lease_owner      = NULL,
        lease_expires_at = NULL,
        updated_at       = now()
    FROM stamp
    WHERE sessions.id = %(session_id)s AND EXISTS (SELECT FROM requeued)
    RETURNING sessions.id, sessions.last_event_seq
), counted AS (
    UPDATE quota_scopes
    SET deferrals = deferrals + 1
    WHERE scope = %(scope)s AND EXISTS (SELECT FROM log_bump)
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
