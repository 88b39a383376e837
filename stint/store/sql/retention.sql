-- name: maintenance_take
-- Take this interval's run of %(task)s for %(worker)s: a row back means it is
-- ours; every other worker finds last_run_at moved and skips the interval.
UPDATE maintenance
SET last_run_at = now(), last_run_by = %(worker)s
WHERE task = %(task)s AND last_run_at <= now() - make_interval(secs => %(every_seconds)s)
RETURNING pruned_until, pruned_after

-- name: prune_head_of_logs
-- Fragment: the events of the doomed turns (CTE doomed: id, session_id), and
-- every earlier event of their sessions, go; each session's
-- events_pruned_through moves up to the cut, so its log stays contiguous.
-- Session rows are locked in id order, the order workers lock them in.
-- Safe under READ COMMITTED: what goes is finished turns and the events up to
-- theirs, which nobody changes any more (events after the cut, appended since
-- the snapshot, have higher seqs and stay); the cut is written on the locked
-- rows, and one worker prunes an interval (maintenance_take).
touched AS MATERIALIZED (
    SELECT s.id, s.events_pruned_through
    FROM sessions s
    WHERE s.id IN (SELECT session_id FROM doomed)
    ORDER BY s.id
    FOR UPDATE
), cut AS (
    SELECT touched.id AS session_id, max(e.seq) AS through
    FROM touched
    JOIN events e ON e.session_id = touched.id
    JOIN doomed d ON d.id = e.turn_id AND d.session_id = touched.id
    WHERE e.seq > touched.events_pruned_through
    GROUP BY touched.id
), gone_events AS (
    DELETE FROM events e
    USING cut
    WHERE e.session_id = cut.session_id AND e.seq <= cut.through
    RETURNING e.session_id
)

-- name: prune_events
-- One batch of the events pass: the events up to each of the next %(batch)s
-- turns finished before the horizon, in (finish time, id) order after the
-- keyset (%(after)s, %(after_id)s) where the last batch stopped.
WITH doomed AS (
    SELECT t.id, t.session_id, t.finished_at
    FROM turns t
    WHERE t.finished_at IS NOT NULL
      AND (t.finished_at, t.id) > (%(after)s::timestamptz, %(after_id)s::uuid)
      AND t.finished_at < now() - make_interval(secs => %(horizon_seconds)s)
    ORDER BY t.finished_at, t.id
    LIMIT %(batch)s
), last_doomed AS (
    SELECT finished_at, id FROM doomed ORDER BY finished_at DESC, id DESC LIMIT 1
), /*include:prune_head_of_logs*/, noted AS (
    UPDATE sessions s
    SET events_pruned_through = cut.through
    FROM cut
    WHERE s.id = cut.session_id
), moved AS (
    UPDATE maintenance
    SET pruned_until = last_doomed.finished_at, pruned_after = last_doomed.id
    FROM last_doomed
    WHERE task = 'prune'
)
SELECT (SELECT count(*) FROM doomed) AS turns, (SELECT count(*) FROM gone_events) AS events,
       (SELECT finished_at FROM last_doomed) AS until, (SELECT id FROM last_doomed) AS until_id

-- name: prune_turns
-- One batch of the turns pass: the next %(batch)s turns finished before the
-- horizon go, with their steps, their conversation messages, their quota
-- reservations (the scopes' counters keep them counted) and (first) every
-- event up to theirs. A turn's events all precede its finish, and a session
-- runs one turn at a time, so what goes is always the head of the log.
WITH doomed AS (
    SELECT t.id, t.session_id, t.seq
    FROM turns t
    WHERE t.finished_at < now() - make_interval(secs => %(horizon_seconds)s)
    ORDER BY t.finished_at, t.id
    LIMIT %(batch)s
), /*include:prune_head_of_logs*/, gone_steps AS (
    DELETE FROM steps st
    USING doomed d
    WHERE st.session_id = d.session_id AND st.turn_id = d.id
    RETURNING 1
), gone_reservations AS (
    DELETE FROM quota_reservations qr
    USING doomed d
    WHERE qr.turn_id = d.id
    RETURNING 1
), gone_messages AS (
    DELETE FROM conversation_messages m
    USING doomed d
    WHERE m.session_id = d.session_id AND m.turn_seq = d.seq
    RETURNING 1
), gone_turns AS (
    DELETE FROM turns t
    USING doomed d
    WHERE t.id = d.id
    RETURNING t.session_id
), noted AS (
    UPDATE sessions s
    SET events_pruned_through = greatest(s.events_pruned_through, coalesce(cut.through, 0)),
        turns_pruned          = s.turns_pruned + gone.n
    FROM (SELECT session_id, count(*) AS n FROM gone_turns GROUP BY session_id) AS gone
    LEFT JOIN cut ON cut.session_id = gone.session_id
    WHERE s.id = gone.session_id
)
SELECT (SELECT count(*) FROM gone_turns) AS turns,
       (SELECT count(*) FROM gone_events) AS events,
       (SELECT count(*) FROM gone_steps) AS steps,
       (SELECT count(*) FROM gone_messages) AS messages,
       (SELECT count(*) FROM gone_reservations) AS reservations

-- name: prune_workers
-- Worker rows of processes stopped (or silent) for longer than the horizon.
-- Safe under READ COMMITTED: the DELETE re-checks its condition on each row's
-- newest version (a worker that beat its heart meanwhile stays).
WITH gone AS (
    DELETE FROM workers
    WHERE CASE WHEN state = 'stopped' THEN stopped_at ELSE heartbeat_at END
          < now() - make_interval(secs => %(horizon_seconds)s)
    RETURNING 1
)
SELECT count(*) AS count FROM gone

-- name: journals_unused
-- Of these sessions, those whose journals hold nothing anyone needs: every
-- turn pruned (a session that no longer exists counts too).
SELECT ids.id AS session_id
FROM unnest(%(session_ids)s::uuid[]) AS ids (id)
WHERE NOT EXISTS (SELECT FROM turns t WHERE t.session_id = ids.id)
  AND NOT EXISTS (SELECT FROM sessions s WHERE s.id = ids.id AND s.turns_pruned = 0)

-- name: prune_idle_sessions_lock
-- Retention, first statement of a transaction: lock up to %(batch)s idle
-- sessions with no turn left (never had one, or all pruned: every turn ever
-- inserted moved last_turn_seq, and only prune_turns removes one, counting it
-- in turns_pruned) and no change since the horizon, oldest first, from
-- sessions_idle_idx. The other tables are read here only to skip what
-- prune_idle_sessions would keep anyway (so a batch of kept rows never comes
-- back for ever).
-- Safe under READ COMMITTED: FOR UPDATE re-checks the row's own conditions on
-- its newest version (an enqueue since the snapshot made it ready or moved
-- last_turn_seq and updated_at), and SKIP LOCKED passes over a session an
-- enqueue, a control or a new schedule's foreign key check holds. The
-- decision is prune_idle_sessions's, taken once these locks are held.
SELECT s.id AS session_id
FROM sessions s
WHERE s.status = 'idle' AND s.queued_turns = 0 AND s.last_turn_seq = s.turns_pruned
  AND s.last_event_seq <= s.events_pruned_through  -- every event pruned (or none ever)
  AND s.updated_at < now() - make_interval(secs => %(horizon_seconds)s)
  AND NOT EXISTS (SELECT FROM schedules sc WHERE sc.session_id = s.id)
ORDER BY s.created_at, s.id
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED

-- name: prune_idle_sessions
-- Retention, second statement: of the sessions prune_idle_sessions_lock locked
-- (%(session_ids)s), those still idle with nothing that refers to them go.
-- Safe under READ COMMITTED (lock first): this statement's snapshot is taken
-- after the locks are held, and nothing can refer to a locked session before
-- the commit: an enqueue locks the row FOR UPDATE first (and then finds no
-- session), an event append updates it, a schedule's foreign key check needs
-- a share lock on it. The conditions are checked again here on that snapshot.
WITH gone AS (
    DELETE FROM sessions s
    WHERE s.id = ANY (%(session_ids)s::uuid[])
      AND s.status = 'idle' AND s.queued_turns = 0 AND s.last_turn_seq = s.turns_pruned
      AND s.updated_at < now() - make_interval(secs => %(horizon_seconds)s)
      AND NOT EXISTS (SELECT FROM turns t WHERE t.session_id = s.id)
      AND NOT EXISTS (SELECT FROM events e WHERE e.session_id = s.id)
      AND NOT EXISTS (SELECT FROM conversation_messages m WHERE m.session_id = s.id)
      AND NOT EXISTS (SELECT FROM schedules sc WHERE sc.session_id = s.id)
    RETURNING 1
)
SELECT count(*) AS count FROM gone

-- name: prune_dashboard_sessions
-- Retention: up to %(batch)s dashboard sign-ins that ended (expired or signed
-- out) go; nothing reads them once ended (dashboard_sessions_find_live asks
-- for a live one).
-- Safe under READ COMMITTED: an ended sign-in never lives again (expires_at
-- never moves, revoked_at is never cleared), and the DELETE re-checks the
-- condition on each row's newest version.
WITH gone AS (
    DELETE FROM dashboard_sessions d
    WHERE d.id IN (SELECT x.id FROM dashboard_sessions x
                   WHERE x.expires_at <= now() OR x.revoked_at IS NOT NULL
                   LIMIT %(batch)s)
      AND (d.expires_at <= now() OR d.revoked_at IS NOT NULL)
    RETURNING 1
)
SELECT count(*) AS count FROM gone
