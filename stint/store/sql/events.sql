-- name: fence_and_count_events
-- Fragment: lock the session row only if this worker still holds its lease
-- (owner and epoch), and reserve seqs for %(kinds)s. No row: the lease is lost
-- and the including statement writes nothing.
fence AS (
    UPDATE sessions
    SET last_event_seq = last_event_seq + cardinality(%(kinds)s::text[]),
        updated_at     = now()
    WHERE id = %(session_id)s AND lease_owner = %(owner)s AND lease_epoch = %(epoch)s
    RETURNING last_event_seq
)

-- name: fenced_events
-- Fragment included by fenced writes: inserts %(kinds)s/%(payloads)s as events
-- numbered right below fence.last_event_seq, which the including statement's
-- "fence" CTE has just advanced by cardinality(%(kinds)s) under the session lock.
events_added AS (
    INSERT INTO events (session_id, seq, turn_id, kind, payload, lease_epoch)
    SELECT %(session_id)s,
           fence.last_event_seq - cardinality(%(kinds)s::text[]) + e.ord,
           %(turn_id)s,
           e.kind,
           e.payload,
           %(epoch)s
    FROM fence,
         unnest(%(kinds)s::text[], %(payloads)s::jsonb[]) WITH ORDINALITY AS e (kind, payload, ord)
    -- NOTIFY folds identical notifications within a transaction into one.
    RETURNING seq, pg_notify(%(events_channel)s, %(session_id)s::text)
)

-- name: events_append
WITH /*include:fence_and_count_events*/, /*include:fenced_events*/
SELECT last_event_seq FROM fence

-- name: events_after
SELECT session_id, seq, kind, turn_id, payload, created_at
FROM events
WHERE session_id = %(session_id)s AND seq > %(after)s
ORDER BY seq
LIMIT %(limit)s
