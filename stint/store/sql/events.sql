-- name: log_reserve
-- THE EVENT LOG'S ONE OWNER, part 1 of 2 (a test fails if any other statement
-- assigns last_event_seq or writes events). A SET item for the including
-- statement's UPDATE of sessions (not aliased), whose rows must reach the CTE
-- named log_bump (id, last_event_seq): it reserves one seq per row of the CTE
-- log_new for that session, under the session row lock (not a sequence:
-- sequences leave gaps on rollback).
last_event_seq = last_event_seq
    + (SELECT count(*) FROM log_new WHERE log_new.session_id = sessions.id)

-- name: log_append
-- THE EVENT LOG'S ONE OWNER, part 2 of 2: insert log_new's rows (session_id,
-- turn_id, kind, payload, lease_epoch, ord = 1..n within each session)
-- numbered right below that session's log_bump.last_event_seq, so a session's
-- seqs are always exactly 1..N. A session without a log_bump row (its fence
-- failed) gets nothing written. NOTIFY folds identical notifications within a
-- transaction into one.
-- THE WEBHOOK OUTBOX is written here too (log_outbox), in the same statement:
-- one pending delivery per enabled endpoint of the session's tenant subscribed
-- to the event's kind, so an event and its deliveries commit together or not
-- at all. The uncorrelated EXISTS is a one-time filter: with no endpoint at
-- all, nothing else of log_outbox runs. Safe under READ COMMITTED: it reads
-- endpoints and the (immutable) tenant in the statement's snapshot, so an
-- endpoint created or disabled meanwhile counts from the next statement; it
-- inserts rows with fresh keys and no foreign key, so it never waits or fails
-- on an endpoint's lock.
log_append AS (
    INSERT INTO events (session_id, seq, turn_id, kind, payload, lease_epoch)
    SELECT log_new.session_id,
           log_bump.last_event_seq - log_total.n + log_new.ord,
           log_new.turn_id,
           log_new.kind,
           log_new.payload,
           log_new.lease_epoch
    FROM log_new
    JOIN log_bump ON log_bump.id = log_new.session_id
    JOIN (SELECT session_id, count(*) AS n FROM log_new GROUP BY session_id) AS log_total
      ON log_total.session_id = log_new.session_id
    RETURNING session_id, seq, kind, pg_notify(%(events_channel)s, session_id::text)
), log_outbox AS (
    INSERT INTO webhook_deliveries (endpoint_id, session_id, seq, kind)
    SELECT w.id, log_append.session_id, log_append.seq, log_append.kind
    FROM log_append
    JOIN sessions log_session ON log_session.id = log_append.session_id
    JOIN webhook_endpoints w
      ON w.tenant = log_session.tenant AND w.disabled_at IS NULL
     AND log_append.kind = ANY (w.kinds)
    WHERE EXISTS (SELECT FROM webhook_endpoints WHERE disabled_at IS NULL)
)

-- name: log_new_from_params
-- Fragment: log_new from the statement's %(events)s, one JSON array of
-- [kind, payload] pairs (one parameter dumped once, not two arrays dumped
-- element by element), written for %(turn_id)s under this worker's lease epoch.
log_new AS (
    SELECT %(session_id)s::uuid AS session_id, %(turn_id)s::uuid AS turn_id,
           e.item ->> 0 AS kind, e.item -> 1 AS payload,
           %(epoch)s::bigint AS lease_epoch, e.ord
    FROM jsonb_array_elements(%(events)s::jsonb) WITH ORDINALITY AS e (item, ord)
)

-- name: lease_fence
-- Fragment: THE LEASE FENCE, the one condition every write under a lease
-- matches the session row on (a test fails if a statement spells it out): this
-- worker (owner) still holds it at the epoch it was claimed at. A row that no
-- longer matches was taken over; the including statement then writes nothing.
id = %(session_id)s AND lease_owner = %(owner)s AND lease_epoch = %(epoch)s

-- name: log_bump_fenced
-- Fragment: reserve seqs for log_new only if this worker still holds the
-- session's lease (owner and epoch). No row: the lease is lost and the
-- including statement writes nothing. Safe under READ COMMITTED: the fence is
-- this UPDATE, which re-checks owner and epoch on the row's newest version
-- after any wait; what the including statement writes hangs off its result.
log_bump AS (
    UPDATE sessions
    SET /*include:log_reserve*/, updated_at = now()
    WHERE /*include:lease_fence*/
    RETURNING id, last_event_seq
)

-- name: events_append
WITH /*include:log_new_from_params*/, /*include:log_bump_fenced*/, /*include:log_append*/
SELECT last_event_seq FROM log_bump

-- name: events_after
-- The catch-up read of every follower. With %(tenant)s set, another tenant's
-- session has no events (checked once per statement, not per row).
SELECT session_id, seq, kind, turn_id, payload, created_at
FROM events
WHERE session_id = %(session_id)s AND seq > %(after)s
  AND (%(tenant)s::text IS NULL
       OR EXISTS (SELECT FROM sessions s WHERE s.id = %(session_id)s AND s.tenant = %(tenant)s))
ORDER BY seq
LIMIT %(limit)s

-- name: events_page
-- One page of a follower's read, bounded by count and by bytes: the events
-- after %(after)s, at most %(limit)s, while their payloads' JSON text adds up
-- to at most %(max_bytes)s, and always the first (however large), so a page
-- is never empty while an event is there. The count bound is applied first,
-- so no more than %(limit)s payloads are measured. With %(tenant)s set,
-- another tenant's session has no events. ``more``: the byte bound left
-- events of the head behind (read again at once).
SELECT session_id, seq, kind, turn_id, payload, created_at, n < head_rows AS more
FROM (
    SELECT head.*,
           sum(octet_length(head.payload::text)) OVER (ORDER BY head.seq) AS running,
           row_number() OVER (ORDER BY head.seq) AS n,
           count(*) OVER () AS head_rows
    FROM (
        SELECT session_id, seq, kind, turn_id, payload, created_at
        FROM events
        WHERE session_id = %(session_id)s AND seq > %(after)s
          AND (%(tenant)s::text IS NULL
               OR EXISTS (SELECT FROM sessions s
                          WHERE s.id = %(session_id)s AND s.tenant = %(tenant)s))
        ORDER BY seq
        LIMIT %(limit)s
    ) head
) page
WHERE n = 1 OR running <= %(max_bytes)s
ORDER BY seq

-- name: events_bounds
-- Where a session's log starts and ends: seqs events_pruned_through + 1 ..
-- last_event_seq exist (retention removed the ones before). No row when the
-- session does not exist or, with %(tenant)s set, is another tenant's.
SELECT events_pruned_through AS pruned_through, last_event_seq
FROM sessions
WHERE id = %(session_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
