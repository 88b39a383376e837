-- name: claim_candidates
-- Fragment: up to %(limit)s claimable sessions this worker's pins accept, locked,
-- oldest first: ready ones by ready_at, and running ones whose lease expired
-- (their owner died or was cut off) by expiry. A ready session whose ready_at
-- lies ahead was handed back until then (turns_defer) and is not taken yet
-- (statement_timestamp(), not now(): a batched transaction may have begun
-- before a session it can see became ready). Two scans, each on its own
-- partial index in its own order, so idle and parked rows are never visited
-- however many there are; SKIP LOCKED lets many workers claim at once. A row
-- locked by one scan but not chosen stays locked only until the commit. The
-- including statement defines claim_gate: no row there, no claim.
--
-- Safe under READ COMMITTED: a row the scans lock is re-read at its newest
-- version and re-checked (still ready, still expired), but chosen_turn and
-- the epoch read the statement's snapshot, taken before the lock. A row that
-- changed in between (a turn cancelled, a claim and release by another
-- worker) could start a turn the snapshot still shows queued. So a row is
-- chosen only if the version it was locked at is the snapshot's (same xmin:
-- every write to a session's turns also updates its row); a row changed
-- since is left ready for the next claim, which whoever changed it woke with
-- a NOTIFY (every statement that leaves a session ready sends one).
ready_pick AS (
    SELECT id, ready_at AS since, xmin AS version
    FROM sessions
    WHERE status = 'ready' AND ready_at <= statement_timestamp()
      AND (pin IS NULL OR pin = ANY (%(pins)s::text[]))
      AND EXISTS (SELECT FROM claim_gate)
    ORDER BY ready_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), expired_pick AS (
    SELECT id, lease_expires_at AS since, xmin AS version
    FROM sessions
    WHERE status = 'running' AND lease_expires_at < now()
      AND (pin IS NULL OR pin = ANY (%(pins)s::text[]))
      -- Not the session a finish is giving up in this same statement: its own
      -- lease may have run out, and a second UPDATE of its row in one statement
      -- would be skipped while its turn was started again (found by the race model).
      AND id IS DISTINCT FROM %(finishing_session)s::uuid
      AND EXISTS (SELECT FROM claim_gate)
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), chosen AS (
    SELECT picked.id, s.lease_epoch + 1 AS epoch
    FROM (SELECT * FROM ready_pick UNION ALL SELECT * FROM expired_pick) AS picked
    JOIN sessions s ON s.id = picked.id AND s.xmin = picked.version
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
-- Fragment: start the turns of starting (id, epoch) at stamp.at. A first
-- attempt also returns how long it waited since enqueue (for the metrics), and
-- every attempt its producer's trace context.
started AS (
    UPDATE turns t
    SET status           = 'running',
        attempts         = t.attempts + 1,
        first_claimed_at = coalesce(t.first_claimed_at, stamp.at),
        started_at       = coalesce(t.started_at, stamp.at),
        worker_id        = %(owner)s
    FROM starting, stamp
    WHERE t.id = starting.id
    RETURNING t.id, t.session_id, t.seq, t.input, t.attempts, t.timeout_seconds, starting.epoch,
              t.traceparent,
              CASE WHEN t.attempts = 1
                   THEN extract(epoch FROM stamp.at - t.enqueued_at)::float8 END AS queue_wait
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
       started.seq, started.input, started.attempts, started.timeout_seconds,
       started.traceparent, started.queue_wait
FROM log_bump
LEFT JOIN started ON started.session_id = log_bump.id

-- name: leases_renew
-- Extend every lease this worker still holds, in one statement; a session
-- missing from the result is no longer ours. Also the worker's heartbeat, and
-- any cancel/interrupt request a missed NOTIFY did not deliver. Rows are
-- locked in id order, the order batches of slot writes lock them in, so a
-- renewal and a batch of the same worker never deadlock.
-- Safe under READ COMMITTED: it decides from the locked rows alone (owner,
-- epoch, controls at their newest version) and updates only them and its own
-- worker row.
WITH held AS (
    SELECT s.id
    FROM sessions s
    JOIN unnest(%(session_ids)s::uuid[], %(epochs)s::bigint[]) AS mine (id, epoch)
      ON mine.id = s.id
    WHERE s.lease_owner = %(owner)s AND s.lease_epoch = mine.epoch
    ORDER BY s.id
    FOR UPDATE OF s
), renewed AS (
    UPDATE sessions s
    SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
    FROM held
    WHERE s.id = held.id
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
-- becomes ready (turns remain, and a NOTIFY wakes a claimer at once) or idle.
-- Safe to call after the turn finished. Safe under READ COMMITTED: fence
-- re-reads the locked row at its newest version, requeued re-checks the turn's
-- newest status, and queued_turns is read by the UPDATE of the locked row.
WITH fence AS (
    SELECT id
    FROM sessions
    WHERE /*include:lease_fence*/
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
    RETURNING id, last_event_seq, status
), /*include:log_append*/
SELECT (SELECT count(*) FROM requeued) AS requeued,
       CASE WHEN log_bump.status = 'ready' THEN pg_notify(%(work_channel)s, '') IS NULL END
           AS notified
FROM log_bump

-- name: sessions_create
-- A new session. With a creation key, at most one per (tenant, key): a retry
-- inserts nothing (waiting for a concurrent first insert to commit) and
-- returns no row; sessions_find_by_creation_key then finds the session.
INSERT INTO sessions (tenant, pin, creation_key)
VALUES (%(tenant)s, %(pin)s, %(creation_key)s)
ON CONFLICT ((coalesce(tenant, '')), creation_key) WHERE creation_key IS NOT NULL DO NOTHING
RETURNING id, created_at

-- name: sessions_create_many
-- New sessions for a batch enqueue, one per element of %(sessions)s (its id
-- made by the caller, so each item knows its session without relying on the
-- order of RETURNING). A creation key used before (or twice in the batch)
-- inserts nothing for that element: fewer rows come back, and the caller
-- enqueues the batch item by item instead. Safe under READ COMMITTED as
-- sessions_create is: the unique index decides, waiting for a concurrent
-- insert of the same key to commit.
INSERT INTO sessions (id, tenant, pin, creation_key)
SELECT r.id, r.tenant, r.pin, r.creation_key
FROM jsonb_to_recordset(%(sessions)s) AS r(id uuid, tenant text, pin text, creation_key text)
ON CONFLICT ((coalesce(tenant, '')), creation_key) WHERE creation_key IS NOT NULL DO NOTHING
RETURNING id

-- name: sessions_find_by_creation_key
SELECT id, pin
FROM sessions
WHERE coalesce(tenant, '') = coalesce(%(tenant)s::text, '') AND creation_key = %(creation_key)s

-- name: sessions_find
SELECT id, status FROM sessions WHERE id = %(session_id)s

-- name: sessions_lock_for_enqueue
-- With %(tenant)s set, another tenant's session is not found (the API's scope).
SELECT tenant, queued_turns, last_turn_seq, lease_owner,
       coalesce(lease_expires_at > now(), false) AS lease_live
FROM sessions
WHERE id = %(session_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
FOR UPDATE

-- name: sessions_count_by_status
-- All sessions, or one tenant's when %(tenant)s is set.
SELECT status, count(*) AS count
FROM sessions
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s
GROUP BY status
ORDER BY status

-- name: sessions_queue_summary
SELECT extract(epoch FROM now() - min(ready_at) FILTER (WHERE status = 'ready'
                                                       AND ready_at <= now()))::float8
           AS oldest_ready_age
FROM sessions
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s

-- name: turns_count_open
-- Unfinished turns by status: queued, running and parked are different things
-- to an operator (waiting for a slot, using one, waiting for a human). All
-- sessions' turns, or one tenant's when %(tenant)s is set.
SELECT t.status, count(*) AS count
FROM turns t
WHERE t.status IN ('queued', 'running', 'parked')
  AND (%(tenant)s::text IS NULL
       OR EXISTS (SELECT FROM sessions s WHERE s.id = t.session_id AND s.tenant = %(tenant)s))
GROUP BY t.status

-- name: sessions_ready_unaccepted
-- Ready sessions no live worker will run, and why: no worker is alive at all,
-- or live workers exist but none accepts the session's pin. They wait; they
-- are never dropped. A worker is live while its heartbeat is younger than its
-- lease (%(live_seconds)s for rows from before workers recorded their lease).
WITH live AS (
    SELECT pins
    FROM workers
    WHERE state = 'running'
      AND heartbeat_at > now() - make_interval(secs => coalesce(lease_seconds, %(live_seconds)s))
)
SELECT (SELECT count(*) FROM live) AS live_workers,
       count(*) FILTER (WHERE NOT EXISTS (SELECT FROM live)) AS without_worker,
       count(*) FILTER (
           WHERE EXISTS (SELECT FROM live)
             AND NOT EXISTS (SELECT FROM live WHERE s.pin IS NULL OR s.pin = ANY (live.pins))
       ) AS unaccepted
FROM sessions s
WHERE s.status = 'ready'

-- name: session_columns
-- Fragment: what a client may see of a session (no lease internals).
id, tenant, pin, status, last_event_seq, queued_turns, created_at, updated_at, parent_id, depth

-- name: sessions_get
-- One session; with %(tenant)s set, only if it belongs to that tenant.
SELECT /*include:session_columns*/
FROM sessions
WHERE id = %(session_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)

-- name: sessions_list
-- One page of a tenant's sessions, newest first, after the keyset
-- (%(before_created_at)s, %(before_id)s) of the previous page's last row.
SELECT /*include:session_columns*/
FROM sessions
WHERE tenant = %(tenant)s
  AND (cardinality(%(statuses)s::text[]) = 0 OR status = ANY (%(statuses)s::text[]))
  AND (%(pin)s::text IS NULL OR pin = %(pin)s)
  AND (%(before_created_at)s::timestamptz IS NULL
       OR (created_at, id) < (%(before_created_at)s::timestamptz, %(before_id)s::uuid))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s

