-- name: sessions_claim
-- Claim up to %(limit)s claimable sessions for one worker, oldest first: ready
-- ones, and running ones whose lease expired (their owner died or was cut off).
-- SKIP LOCKED lets many workers claim at once without waiting on each other;
-- the epoch bump fences every write of the previous owner.
WITH picked AS (
    SELECT id
    FROM sessions
    WHERE (status = 'ready' OR (status = 'running' AND lease_expires_at < now()))
      AND (pin IS NULL OR pin = ANY (%(pins)s::text[]))
    ORDER BY CASE WHEN status = 'ready' THEN ready_at ELSE lease_expires_at END
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE sessions s
SET status           = 'running',
    lease_owner      = %(owner)s,
    lease_epoch      = s.lease_epoch + 1,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
    claimed_at       = now(),
    updated_at       = now()
FROM picked
WHERE s.id = picked.id
RETURNING s.id AS session_id, s.lease_owner AS owner, s.lease_epoch AS epoch

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
    SELECT requeued.id AS turn_id, 'turn.released'::text AS kind,
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
    RETURNING last_event_seq
), /*include:log_append*/
SELECT (SELECT count(*) FROM requeued) AS requeued FROM log_bump

-- name: sessions_create
-- A new session. With a creation key, at most one per (tenant, key): a retry
-- inserts nothing (waiting for a concurrent first insert to commit) and
-- returns no row; sessions_find_by_creation_key then finds the session.
INSERT INTO sessions (tenant, pin, creation_key)
VALUES (%(tenant)s, %(pin)s, %(creation_key)s)
ON CONFLICT ((coalesce(tenant, '')), creation_key) WHERE creation_key IS NOT NULL DO NOTHING
RETURNING id, created_at

-- name: sessions_find_by_creation_key
SELECT id, pin
FROM sessions
WHERE coalesce(tenant, '') = coalesce(%(tenant)s::text, '') AND creation_key = %(creation_key)s

-- name: sessions_find
SELECT id, status FROM sessions WHERE id = %(session_id)s

-- name: sessions_lock_for_enqueue
-- With %(tenant)s set, another tenant's session is not found (the API's scope).
SELECT queued_turns, last_turn_seq, lease_owner, coalesce(lease_expires_at > now(), false) AS lease_live
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
SELECT extract(epoch FROM now() - min(ready_at) FILTER (WHERE status = 'ready'))::float8
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
id, tenant, pin, status, last_event_seq, queued_turns, created_at, updated_at

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

