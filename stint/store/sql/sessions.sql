-- name: claim_candidates
-- Fragment: up to %(limit)s claimable sessions this worker's pins accept, locked,
-- oldest first: ready ones by ready_at, and running ones whose lease expired
-- (their owner died or was cut off) by expiry. Two scans, each on its own
-- partial index in its own order, so idle and parked rows are never visited
-- however many there are; SKIP LOCKED lets many workers claim at once. A row
-- locked by one scan but not chosen stays locked only until the commit. The
-- including statement defines claim_gate: no row there, no claim.
ready_pick AS (
    SELECT id, ready_at AS since
    FROM sessions
    WHERE status = 'ready' AND (pin IS NULL OR pin = ANY (%(pins)s::text[]))
      AND EXISTS (SELECT FROM claim_gate)
    ORDER BY ready_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), expired_pick AS (
    SELECT id, lease_expires_at AS since
    FROM sessions
    WHERE status = 'running' AND lease_expires_at < now()
      AND (pin IS NULL OR pin = ANY (%(pins)s::text[]))
      AND EXISTS (SELECT FROM claim_gate)
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), chosen AS (
    SELECT picked.id, s.lease_epoch + 1 AS epoch
    FROM (SELECT * FROM ready_pick UNION ALL SELECT * FROM expired_pick) AS picked
    JOIN sessions s ON s.id = picked.id
    ORDER BY picked.since
    LIMIT %(limit)s
), chosen_turn AS (
    -- Each chosen session's oldest unfinished turn (a running one is a retry
    -- after a lost lease); a session may have none left (all cancelled).
    SELECT DISTINCT ON (t.session_id) t.id, t.session_id, chosen.epoch
    FROM turns t
    JOIN chosen ON chosen.id = t.session_id
    WHERE t.status IN ('queued', 'running')
    ORDER BY t.session_id, t.seq
)

-- name: claim_lease
-- Fragment: the SET items that give a chosen session to this worker under a
-- new epoch (which fences every write of its previous owner).
status           = 'running',
lease_owner      = %(owner)s,
lease_epoch      = lease_epoch + 1,
lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
claimed_at       = (SELECT at FROM stamp),
updated_at       = now()

-- name: stamp
-- Fragment: the statement's one moment, for its audit times. clock_timestamp(),
-- not now(): a statement may run late in a batched transaction, and a turn's
-- times must say when it really started or finished; taken once, so a turn
-- finished and the next one started by the same statement share one instant.
stamp AS MATERIALIZED (SELECT clock_timestamp() AS at)

-- name: start_turns
-- Fragment: start the turns of starting (id, epoch) at stamp.at.
started AS (
    UPDATE turns t
    SET status           = 'running',
        attempts         = t.attempts + 1,
        first_claimed_at = coalesce(t.first_claimed_at, stamp.at),
        started_at       = coalesce(t.started_at, stamp.at),
        worker_id        = %(owner)s
    FROM starting, stamp
    WHERE t.id = starting.id
    RETURNING t.id, t.session_id, t.seq, t.input, t.attempts, t.timeout_seconds, starting.epoch
)

-- name: turns_claim
-- Claim up to %(limit)s sessions and start the next turn of each, in one
-- statement: a freed slot is busy again after one round trip.
WITH /*include:stamp*/, claim_gate AS (SELECT), /*include:claim_candidates*/,
starting AS (SELECT id, epoch FROM chosen_turn), /*include:start_turns*/,
log_new AS (
    SELECT started.session_id, started.id AS turn_id, 'turn.started'::text AS kind,
           jsonb_build_object('attempt', started.attempts, 'worker', %(owner)s::text) AS payload,
           started.epoch AS lease_epoch, 1::bigint AS ord
    FROM started
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/, /*include:claim_lease*/
    FROM chosen
    WHERE sessions.id = chosen.id
    RETURNING sessions.id, sessions.last_event_seq, sessions.lease_epoch
), /*include:log_append*/
SELECT log_bump.id AS session_id, log_bump.lease_epoch AS epoch, started.id AS turn_id,
       started.seq, started.input, started.attempts, started.timeout_seconds
FROM log_bump
LEFT JOIN started ON started.session_id = log_bump.id

-- name: leases_renew
-- Extend every lease this worker still holds, in one statement; a session
-- missing from the result is no longer ours. Also the worker's heartbeat, and
-- any cancel/interrupt request a missed NOTIFY did not deliver.
WITH renewed AS (
    UPDATE sessions s
    SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
    FROM unnest(%(session_ids)s::uuid[], %(epochs)s::bigint[]) AS held (id, epoch)
    WHERE s.id = held.id
      AND s.lease_owner = %(owner)s
      AND s.lease_epoch = held.epoch
    RETURNING s.id, s.control, s.control_turn_id, s.control_reason
), beat AS (
    -- Keyed by pid too: a process restarted under the same worker id owns the row,
    -- and a stale process with that id can no longer touch it.
    UPDATE workers SET heartbeat_at = now() WHERE id = %(owner)s AND pid = %(pid)s
)
SELECT id AS session_id, control, control_turn_id, control_reason FROM renewed

-- name: sessions_release
-- Give a session back. If %(turn_id)s is still running it returns to queued with
-- its committed steps kept, and a turn.released event says so; the session
-- becomes ready (turns remain) or idle. Safe to call after the turn finished.
WITH fence AS (
    SELECT id
    FROM sessions
    WHERE id = %(session_id)s AND lease_owner = %(owner)s AND lease_epoch = %(epoch)s
    FOR UPDATE
), requeued AS (
    UPDATE turns
    SET status = 'queued'
    WHERE id = %(turn_id)s AND status = 'running' AND EXISTS (SELECT FROM fence)
    RETURNING id, seq
), log_new AS (
    SELECT %(session_id)s::uuid AS session_id, requeued.id AS turn_id,
           'turn.released'::text AS kind,
           jsonb_build_object('reason', %(reason)s::text, 'worker', %(owner)s::text) AS payload,
           %(epoch)s::bigint AS lease_epoch, 1::bigint AS ord
    FROM requeued
), log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/,
        status           = CASE WHEN queued_turns > 0 THEN 'ready' ELSE 'idle' END,
        ready_at         = CASE WHEN queued_turns > 0 THEN now() END,
        lease_owner      = NULL,
        lease_expires_at = NULL,
        updated_at       = now()
    WHERE id = %(session_id)s AND EXISTS (SELECT FROM fence)
    RETURNING id, last_event_seq
), /*include:log_append*/
SELECT (SELECT count(*) FROM requeued) AS requeued FROM log_bump

-- name: sessions_create
INSERT INTO sessions (tenant, pin)
VALUES (%(tenant)s, %(pin)s)
RETURNING id, created_at

-- name: sessions_lock_for_enqueue
SELECT queued_turns, last_turn_seq, lease_owner, coalesce(lease_expires_at > now(), false) AS lease_live
FROM sessions
WHERE id = %(session_id)s
FOR UPDATE

-- name: sessions_count_by_status
SELECT status, count(*) AS count FROM sessions GROUP BY status ORDER BY status

-- name: sessions_queue_summary
SELECT coalesce(sum(queued_turns), 0)::bigint AS queued_turns,
       extract(epoch FROM now() - min(ready_at) FILTER (WHERE status = 'ready'))::float8
           AS oldest_ready_age
FROM sessions

-- name: sessions_ready_unaccepted
-- Ready sessions that no live worker (heartbeat within %(live_seconds)s) accepts:
-- their pin matches no running worker's pins. They wait; they are never dropped.
SELECT count(*) AS count
FROM sessions s
WHERE s.status = 'ready'
  AND NOT EXISTS (
      SELECT FROM workers w
      WHERE w.state = 'running'
        AND w.heartbeat_at > now() - make_interval(secs => %(live_seconds)s)
        AND (s.pin IS NULL OR s.pin = ANY (w.pins))
  )
