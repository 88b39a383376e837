-- name: checks_event_gaps
-- Sessions whose event log is not exactly events_pruned_through + 1 ..
-- last_event_seq (1..last_event_seq until retention pruned its head; the
-- primary key already forbids duplicates, so count, min and max settle it).
SELECT s.id AS session_id, s.last_event_seq, s.events_pruned_through,
       count(e.seq) AS count, min(e.seq) AS min, max(e.seq) AS max
FROM sessions s
LEFT JOIN events e ON e.session_id = s.id
GROUP BY s.id
HAVING count(e.seq) <> s.last_event_seq - s.events_pruned_through
    OR coalesce(min(e.seq), s.events_pruned_through + 1) <> s.events_pruned_through + 1
    OR coalesce(max(e.seq), s.last_event_seq) <> s.last_event_seq

-- name: checks_turns_of_pruned_sessions
-- The turns left in sessions retention has pruned turns from (a journal line
-- of a turn not among them belonged to a pruned turn, not to a lost step).
SELECT s.id AS session_id, t.id AS turn_id
FROM sessions s
LEFT JOIN turns t ON t.session_id = s.id
WHERE s.turns_pruned > 0

-- name: checks_event_totals
SELECT count(DISTINCT session_id) AS sessions_with_events, count(*) AS events FROM events

-- name: checks_turn_statuses
SELECT status, count(*) AS count, coalesce(max(attempts), 0) AS max_attempts
FROM turns GROUP BY status ORDER BY status

-- name: checks_steps
SELECT session_id, turn_id, step_key, kind, status FROM steps ORDER BY session_id, step_key

-- name: checks_identity_mismatches
-- Rows whose session/turn identities disagree: events or steps naming a turn
-- of another session, events naming a turn that does not exist (events have
-- no foreign key to turns: migration 0011), turns numbered out of their
-- session's range, or a session whose queued_turns differs from its
-- unfinished turns.
SELECT 'event' AS what, e.session_id::text AS session_id, e.seq::text AS detail
FROM events e JOIN turns t ON t.id = e.turn_id
WHERE t.session_id <> e.session_id
UNION ALL
SELECT 'event_turn_missing', e.session_id::text, e.seq::text
FROM events e
WHERE e.turn_id IS NOT NULL AND NOT EXISTS (SELECT FROM turns t WHERE t.id = e.turn_id)
UNION ALL
SELECT 'step', st.session_id::text, st.step_key
FROM steps st JOIN turns t ON t.id = st.turn_id
WHERE t.session_id <> st.session_id
UNION ALL
SELECT 'turn_seq', t.session_id::text, t.seq::text
FROM turns t JOIN sessions s ON s.id = t.session_id
WHERE t.seq > s.last_turn_seq
UNION ALL
SELECT 'queued_turns', s.id::text, s.queued_turns::text
FROM sessions s
WHERE s.queued_turns <> (SELECT count(*) FROM turns t
                         WHERE t.session_id = s.id AND t.status IN ('queued', 'running', 'parked'))

-- name: checks_zombie_writes
-- Worker-written events that went back to an older lease epoch after a newer
-- epoch had written: a stale owner wrote after it was fenced.
SELECT session_id, seq, lease_epoch AS epoch, newest_before AS newer_epoch_before
FROM (
    SELECT session_id, seq, lease_epoch,
           max(lease_epoch) OVER (PARTITION BY session_id ORDER BY seq
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
               AS newest_before
    FROM events
    WHERE lease_epoch IS NOT NULL
) ordered
WHERE lease_epoch < newest_before

-- name: checks_attempts
SELECT t.session_id, max(t.attempts) AS attempts FROM turns t GROUP BY t.session_id

-- name: checks_stale_leases
-- Leases that nobody will renew: expired running sessions, and sessions
-- still leased by a worker that has stopped.
SELECT s.id AS session_id, s.lease_owner AS owner, s.lease_expires_at < now() AS expired,
       coalesce(w.state = 'stopped', false) AS owner_stopped
FROM sessions s
LEFT JOIN workers w ON w.id = s.lease_owner
WHERE s.status = 'running' AND (s.lease_expires_at < now() OR w.state = 'stopped')

-- name: checks_stranded_leases
-- Live leases no slot uses (the liveness invariant of docs/design.md):
-- * a session leased with no running turn for longer than %(grace_seconds)s:
--   a claim or a finish starts the next turn in the statement that takes or
--   keeps the lease, and every statement that ends a session's last turn
--   gives the lease up, so a leased session without a running turn lasts an
--   instant (a turn queued behind it then waits for nothing but the lease);
-- * a lease its live owner renews no more: each renewal is also the owner's
--   heartbeat, in one statement, every third of a lease, so a lease last
--   extended more than two renewal intervals plus %(grace_seconds)s before
--   its owner's latest heartbeat is held by none of that owner's slots.
-- A dead or paused owner renews nothing and beats no heart: its leases
-- expire and are taken over, which is recovery, not a stranded lease.
SELECT s.id AS session_id, s.lease_owner AS owner, s.lease_epoch AS epoch, s.queued_turns,
       NOT EXISTS (SELECT FROM turns t WHERE t.session_id = s.id AND t.status = 'running')
           AS no_running_turn,
       extract(epoch FROM now() - greatest(s.claimed_at, finished.at))::float8 AS since_s,
       extract(epoch FROM w.heartbeat_at - s.lease_expires_at)::float8
           + w.lease_seconds AS unrenewed_s,
       extract(epoch FROM now() - s.lease_expires_at)::float8 * -1 AS expires_in_s
FROM sessions s
LEFT JOIN workers w ON w.id = s.lease_owner
LEFT JOIN LATERAL (
    SELECT max(t.finished_at) AS at FROM turns t WHERE t.session_id = s.id
) finished ON true
WHERE s.status = 'running' AND s.lease_owner IS NOT NULL AND s.lease_expires_at > now()
  AND ((NOT EXISTS (SELECT FROM turns t WHERE t.session_id = s.id AND t.status = 'running')
        AND greatest(s.claimed_at, finished.at)
            < now() - make_interval(secs => %(grace_seconds)s))
       OR (w.state IS DISTINCT FROM 'stopped' AND w.lease_seconds IS NOT NULL
           AND w.heartbeat_at - (s.lease_expires_at - make_interval(secs => w.lease_seconds))
               > make_interval(secs => w.lease_seconds * 2 / 3 + %(grace_seconds)s)))
ORDER BY s.id

-- name: checks_snapshot
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY
