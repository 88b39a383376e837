-- name: waits_begin
-- Under the lease: record a wait step started and what it waits for. Its
-- deadline is fixed here from the database clock (%(seconds)s from now, or
-- the time %(until)s; neither: no deadline), so every replay of the turn
-- waits for the same moment. No event: the turn announces wait.started when
-- it is set aside (turns_wait).
-- Safe under READ COMMITTED: the fence is an UPDATE of the session row
-- (re-checked on its newest version); both inserts hang off its result and
-- are new rows keyed by the step, which only this lease holder writes.
WITH fence AS (
    UPDATE sessions SET updated_at = now()
    WHERE /*include:lease_fence*/
    RETURNING id
), limit_at AS MATERIALIZED (
    SELECT coalesce(%(until)s::timestamptz,
                    clock_timestamp() + make_interval(secs => %(seconds)s::float8)) AS deadline
), recorded AS (
    INSERT INTO steps (session_id, turn_id, step_key, kind, status, request_digest, lease_epoch)
    SELECT %(session_id)s, %(turn_id)s, %(step_key)s, 'wait', 'started', %(digest)s, %(epoch)s
    FROM fence
), waiting AS (
    INSERT INTO waits (session_id, turn_id, step_key, kind, name, children, wait_all, deadline)
    SELECT %(session_id)s, %(turn_id)s, %(step_key)s, %(wait_kind)s::text, %(signal_name)s::text,
           %(children)s::uuid[], %(wait_all)s::boolean, limit_at.deadline
    FROM fence, limit_at
)
SELECT limit_at.deadline FROM fence, limit_at

-- name: waits_settle
-- Under the lease: is the wait %(step_key)s over? For a signal wait, the
-- session's oldest unconsumed signal of its name is consumed by it; a
-- children wait is over when all (or any) of its children were reported
-- ended (children_report), its result listing each child's end; else a
-- passed deadline ends it (a timer: elapsed; the others: timeout). An
-- ended wait's step commits with the outcome as its result, in this same
-- statement as the consumption, with a wait.finished event: a crash leaves
-- either both or neither, so each signal is consumed exactly once and a
-- replay of a committed wait returns what it got. Not over: nothing written.
-- Safe under READ COMMITTED: the fence is log_bump's UPDATE of the session
-- row; the signal is read in the statement's snapshot, but only the lease
-- holder consumes a session's signals and its statements run one after
-- another (an earlier holder's writes committed before this lease was
-- claimed, a later one fences this statement), so no consumption can commit
-- between the snapshot and the lock; the consumption also re-checks
-- consumed_at IS NULL on the row's newest version, and the step commits only
-- with it. A signal inserted after the snapshot waits for the next settle:
-- its sender wakes the session (signals_send); so does a child's report
-- (children_report), and children are read here only.
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS at
), waited AS (
    SELECT w.kind, w.name, w.deadline, w.children, w.wait_all
    FROM waits w
    JOIN steps st ON st.session_id = w.session_id AND st.turn_id = w.turn_id
                 AND st.step_key = w.step_key
    WHERE w.session_id = %(session_id)s AND w.turn_id = %(turn_id)s
      AND w.step_key = %(step_key)s AND st.status = 'started'
), pending AS (
    SELECT s.id, s.name, s.payload, s.created_at
    FROM signals s
    JOIN waited ON waited.kind = 'signal' AND s.name = waited.name
    WHERE s.session_id = %(session_id)s AND s.consumed_at IS NULL
    ORDER BY s.created_at, s.id
    LIMIT 1
), kids AS (
    SELECT k.child_id, k.status, k.output, k.error, k.reported_at,
           array_position(waited.children, k.child_id) AS position
    FROM children k
    JOIN waited ON waited.kind = 'children' AND k.child_id = ANY (waited.children)
    WHERE k.parent_id = %(session_id)s
), kids_done AS (
    SELECT count(*) FILTER (WHERE reported_at IS NOT NULL) AS done,
           jsonb_agg(jsonb_build_object('child_id', child_id, 'status', status,
                                        'output', output, 'error', error)
                     ORDER BY position) AS ends
    FROM kids
), decided AS MATERIALIZED (
    SELECT waited.kind,
           CASE WHEN pending.id IS NOT NULL THEN 'signal'
                WHEN waited.kind = 'children'
                     AND kids_done.done >= CASE WHEN waited.wait_all
                                                THEN cardinality(waited.children) ELSE 1 END
                THEN 'children'
                WHEN waited.deadline <= clock.at
                THEN CASE WHEN waited.kind = 'timer' THEN 'elapsed' ELSE 'timeout' END
           END AS outcome,
           pending.id AS signal_id,
           pending.name AS signal_name,
           pending.payload AS signal_payload,
           pending.created_at AS sent_at,
           CASE WHEN waited.kind = 'children' THEN kids_done.ends END AS children,
           waited.deadline
    FROM waited
    CROSS JOIN clock
    CROSS JOIN kids_done
    LEFT JOIN pending ON true
), over AS (
    SELECT * FROM decided WHERE outcome IS NOT NULL
), log_new AS (
    SELECT %(session_id)s::uuid AS session_id, %(turn_id)s::uuid AS turn_id,
           'wait.finished'::text AS kind,
           jsonb_build_object('step_key', %(step_key)s::text, 'kind', over.kind,
                              'outcome', over.outcome, 'signal_id', over.signal_id)
               AS payload,
           %(epoch)s::bigint AS lease_epoch, 1::bigint AS ord
    FROM over
), /*include:log_bump_fenced*/, consumed AS (
    UPDATE signals
    SET consumed_turn_id = %(turn_id)s, consumed_step_key = %(step_key)s,
        consumed_at = (SELECT at FROM clock)
    FROM over
    WHERE signals.id = over.signal_id AND signals.consumed_at IS NULL
      AND EXISTS (SELECT FROM log_bump)
    RETURNING signals.id
), committed AS (
    UPDATE steps
    SET status = 'committed', finished_at = (SELECT at FROM clock), lease_epoch = %(epoch)s,
        result = jsonb_build_object('outcome', over.outcome, 'deadline', over.deadline,
                                    'children', over.children,
                                    'signal', CASE WHEN over.signal_id IS NOT NULL THEN
                                        jsonb_build_object('id', over.signal_id,
                                                           'name', over.signal_name,
                                                           'payload', over.signal_payload,
                                                           'sent_at', over.sent_at) END)
    FROM over
    WHERE steps.session_id = %(session_id)s AND steps.turn_id = %(turn_id)s
      AND steps.step_key = %(step_key)s AND steps.status = 'started'
      AND EXISTS (SELECT FROM log_bump)
      AND (over.signal_id IS NULL OR EXISTS (SELECT FROM consumed))
    RETURNING steps.result
), /*include:log_append*/
SELECT log_bump.last_event_seq, (SELECT result FROM committed) AS result
FROM log_bump

-- name: turns_wait
-- Under the lease: the turn waits (%(step_key)s, recorded by waits_begin and
-- not over). As turns_defer: it goes back to queued with its committed steps
-- kept, and the session is released as ready with ready_at at the wait's
-- deadline ('infinity' without one), so no claim takes it before then; a
-- wait.started event says so. Whatever can end the wait early (a signal, a
-- child's end) moves ready_at to now under the session lock. A cancel or
-- interrupt already requested for this turn wins, as in turns_park.
-- Safe under READ COMMITTED: held locks the row and reads its newest
-- version, but the pending-signal check reads the statement's snapshot, taken
-- before that lock (so does the children check). A signal sender and a
-- child's reporter update the session row in their transactions, so if the
-- locked version is not the snapshot's (same xmin,
-- as the claims use) something may have arrived unseen, and the session is
-- made ready at once instead (a wasted replay at worst, never a lost wake);
-- a sender that commits after this statement finds the session ready and
-- moves its ready_at to now. The requeue re-checks the turn's newest status.
WITH held AS (
    SELECT id, control, control_turn_id, control_reason, xmin AS version
    FROM sessions
    WHERE /*include:lease_fence*/
    FOR UPDATE
), waited AS (
    SELECT w.kind, w.name, w.deadline, w.children, w.wait_all
    FROM waits w
    WHERE w.session_id = %(session_id)s AND w.turn_id = %(turn_id)s
      AND w.step_key = %(step_key)s
), requeued AS (
    UPDATE turns t
    SET status = 'queued'
    FROM held
    WHERE t.id = %(turn_id)s AND t.status = 'running'
      AND held.control_turn_id IS DISTINCT FROM %(turn_id)s
    RETURNING t.id
), wake AS MATERIALIZED (
    SELECT CASE
               WHEN NOT EXISTS (SELECT FROM sessions s, held
                                WHERE s.id = held.id AND s.xmin = held.version)
                 OR EXISTS (SELECT FROM signals sg
                            WHERE sg.session_id = %(session_id)s AND sg.name = waited.name
                              AND sg.consumed_at IS NULL)
                 OR (SELECT count(*) FROM children k
                     WHERE k.parent_id = %(session_id)s AND k.child_id = ANY (waited.children)
                       AND k.reported_at IS NOT NULL)
                    >= CASE WHEN waited.wait_all THEN cardinality(waited.children) ELSE 1 END
               THEN clock_timestamp()
               ELSE coalesce(waited.deadline, 'infinity'::timestamptz)
           END AS at
    FROM waited
), log_new AS (
    SELECT %(session_id)s::uuid AS session_id, requeued.id AS turn_id,
           'wait.started'::text AS kind,
           jsonb_build_object('step_key', %(step_key)s::text, 'kind', waited.kind,
                              'name', waited.name, 'deadline', waited.deadline,
                              'worker', %(owner)s::text)
               AS payload,
           %(epoch)s::bigint AS lease_epoch, 1::bigint AS ord
    FROM requeued, waited
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/,
        status           = 'ready',
        ready_at         = wake.at,
        lease_owner      = NULL,
        lease_expires_at = NULL,
        updated_at       = now()
    FROM wake
    WHERE sessions.id = %(session_id)s AND EXISTS (SELECT FROM requeued)
    RETURNING sessions.id, sessions.last_event_seq
), /*include:log_append*/
SELECT EXISTS (SELECT FROM log_bump) AS parked, held.control, held.control_reason,
       CASE WHEN EXISTS (SELECT FROM log_bump) AND (SELECT at FROM wake) <= clock_timestamp()
            THEN pg_notify(%(work_channel)s, '') IS NULL END AS notified
FROM held
WHERE EXISTS (SELECT FROM log_bump) OR held.control_turn_id = %(turn_id)s

-- name: signals_send
-- Keep a signal for the session (lock first: runs after controls_lock_session
-- in the same transaction). A new key inserts the signal with a
-- signal.received event and, when the session's waiting turn waits for a
-- signal of this name, moves its ready_at to now and wakes a claimer; a key
-- already used inserts nothing and returns no row (signals_find_by_key tells
-- a retry from a conflict). The session row is updated whenever a signal is
-- kept, whatever its status, so a worker setting a turn aside at this moment
-- sees a changed row version and wakes it at once (turns_wait).
-- Safe under READ COMMITTED: the session row was locked by the previous
-- statement, so this snapshot holds every wait recorded before it and none
-- can change until the commit; the insert's key conflict is decided on the
-- newest rows.
WITH sent AS (
    INSERT INTO signals (session_id, name, idempotency_key, payload, actor)
    VALUES (%(session_id)s, %(signal_name)s, %(idempotency_key)s, %(payload)s,
            coalesce(%(actor)s::jsonb, '{}'::jsonb))
    ON CONFLICT (session_id, idempotency_key) DO NOTHING
    RETURNING id
), waiting AS (
    SELECT FROM waits w
    JOIN steps st ON st.session_id = w.session_id AND st.turn_id = w.turn_id
                 AND st.step_key = w.step_key
    WHERE w.session_id = %(session_id)s AND w.kind = 'signal' AND w.name = %(signal_name)s
      AND st.status = 'started'
), log_new AS (
    SELECT %(session_id)s::uuid AS session_id, NULL::uuid AS turn_id,
           'signal.received'::text AS kind,
           jsonb_build_object('name', %(signal_name)s::text, 'signal_id', sent.id,
                              'actor', %(actor)s::jsonb) AS payload,
           NULL::bigint AS lease_epoch, 1::bigint AS ord
    FROM sent
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/,
        ready_at   = CASE WHEN status = 'ready' AND EXISTS (SELECT FROM waiting)
                          THEN least(ready_at, now()) ELSE ready_at END,
        updated_at = now()
    WHERE id = %(session_id)s AND EXISTS (SELECT FROM sent)
    RETURNING id, last_event_seq, status, ready_at
), /*include:log_append*/
SELECT sent.id,
       CASE WHEN log_bump.status = 'ready' AND log_bump.ready_at <= now()
            THEN pg_notify(%(work_channel)s, '') IS NULL END AS notified
FROM sent, log_bump

-- name: signals_find_by_key
-- The signal an earlier send with this key kept: a retry is the same signal
-- only with the same name and payload.
SELECT id, name = %(signal_name)s AND payload = %(payload)s::jsonb AS same_signal
FROM signals
WHERE session_id = %(session_id)s AND idempotency_key = %(idempotency_key)s
