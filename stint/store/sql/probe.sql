-- name: turns_progress
SELECT count(*) FILTER (WHERE status IN ('succeeded', 'failed', 'cancelled', 'interrupted'))
           AS finished,
       count(*) AS total,
       (SELECT count(*) FROM sessions WHERE status = 'running') AS running_sessions
FROM turns

-- name: turns_timings
-- Per finished turn, from the database clock: end-to-end, queue wait, run time.
SELECT extract(epoch FROM enqueued_at)::float8 AS enqueued_at,
       extract(epoch FROM started_at)::float8 AS started_at,
       extract(epoch FROM finished_at)::float8 AS finished_at,
       extract(epoch FROM finished_at - enqueued_at)::float8 AS end_to_end,
       extract(epoch FROM first_claimed_at - enqueued_at)::float8 AS queue_wait,
       extract(epoch FROM finished_at - started_at)::float8 AS run_time,
       status,
       attempts,
       worker_id
FROM turns
WHERE finished_at IS NOT NULL
ORDER BY finished_at

-- name: statements_enable
-- Needs shared_preload_libraries = pg_stat_statements (the benchmark's own server).
CREATE EXTENSION IF NOT EXISTS pg_stat_statements

-- name: statements_reset
SELECT pg_stat_statements_reset()

-- name: statements_all
-- Every statement executed in this database since the reset, with its calls
-- and mean execution time. The caller matches texts itself: pg_stat_statements
-- stores a statement with its literal constants replaced by $n, so a text as
-- sent compares equal only when it has no literal ('running', 1).
SELECT query, calls, mean_exec_time AS mean_ms
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT LIKE 'SELECT pg_stat_statements_reset%%'

-- name: workers_running
SELECT count(*) AS count FROM workers WHERE state = 'running'

-- name: load_sample
-- One load-test sample: sessions running now, and worker connections open now.
SELECT (SELECT count(*) FROM sessions WHERE status = 'running') AS running_sessions,
       (SELECT count(*) FROM pg_stat_activity
        WHERE datname = current_database() AND application_name LIKE 'stint-worker-%%')
           AS worker_connections

-- name: table_footprint
-- Rows and bytes (heap, indexes, toast) of each Stint table.
SELECT c.relname AS name, c.reltuples::bigint AS rows, pg_total_relation_size(c.oid) AS bytes
FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace
  AND c.relkind = 'r'
ORDER BY c.relname

-- name: vacuum_analyze
-- What autovacuum would have done by now: dead row versions gone, statistics fresh.
VACUUM (ANALYZE)

-- name: event_times
-- DB-clock times of one kind of event, per session (for control latencies).
SELECT session_id, extract(epoch FROM created_at)::float8 AS at
FROM events
WHERE kind = %(kind)s

-- name: sessions_held_by
-- Leases one worker holds now, with their epochs (a fault test's victims).
SELECT id AS session_id, lease_epoch AS epoch FROM sessions WHERE lease_owner = %(owner)s

-- name: sessions_in_flight
-- Sessions with unfinished turns: the ones a server-wide fault can touch.
SELECT id AS session_id FROM sessions WHERE queued_turns > 0

-- name: sessions_owned_since
-- Of the given (session, epoch) pairs, those still held under that same epoch.
SELECT s.id AS session_id
FROM sessions s
JOIN unnest(%(session_ids)s::uuid[], %(epochs)s::bigint[]) AS held (id, epoch) ON held.id = s.id
WHERE s.lease_epoch = held.epoch AND s.lease_owner IS NOT NULL

-- name: backend_pids
-- The server processes of this database's connections named %(application)s: the
-- load test leaves its own probes' CPU out of what it charges to turns.
SELECT pid
FROM pg_stat_activity
WHERE datname = current_database() AND application_name = %(application)s

-- name: backend_kinds
-- What each server process is: its connection's application_name, or for a
-- process with none (autovacuum, the checkpointer, the WAL writer) its
-- backend_type. The scale soak splits PostgreSQL's CPU by these.
SELECT pid,
       CASE WHEN application_name <> '' THEN application_name ELSE backend_type END AS kind
FROM pg_stat_activity
WHERE datname = current_database() OR datname IS NULL

-- name: turns_finished_after
-- Turns finished after a moment (epoch seconds): has work resumed?
SELECT count(*) AS count FROM turns WHERE finished_at > to_timestamp(%(after)s)

-- name: connections_by_application
-- Connections open now in this database per application_name starting with
-- %(prefix)s (the API's pools and LISTEN connection, say).
SELECT application_name AS name, count(*) AS count
FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE %(prefix)s || '%%'
GROUP BY application_name
ORDER BY application_name

-- name: event_logs
-- Every session's log as (seq, kind), in order: what every follower must have seen.
SELECT session_id, seq, kind FROM events ORDER BY session_id, seq


-- name: queue_age
-- The oldest ready session's wait, and how many are ready, now.
SELECT count(*) AS ready,
       extract(epoch FROM now() - min(ready_at) FILTER (WHERE ready_at <= now()))::float8
           AS oldest_ready_age
FROM sessions
WHERE status = 'ready'

-- name: table_sizes
-- Bytes of each Stint table, its indexes and toast included (no VACUUM first:
-- a sample taken while work runs).
SELECT c.relname AS name, c.reltuples::bigint AS rows, pg_total_relation_size(c.oid) AS bytes
FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace
  AND c.relkind = 'r'
ORDER BY c.relname

-- name: sessions_seed_parked
-- A load-test fixture: %(count)s sessions parked on a question (a parked turn
-- with a started answer step), as a long-lived deployment accumulates them.
-- READ COMMITTED is no concern: it writes new rows only, before workers run.
-- Written directly: making 10,000 parked sessions through workers takes
-- minutes and measures nothing the scale run needs.
WITH made AS (
    INSERT INTO sessions (status, queued_turns, last_turn_seq)
    SELECT 'parked', 1, 1 FROM generate_series(1, %(count)s)
    RETURNING id
), parked AS (
    INSERT INTO turns (session_id, seq, idempotency_key, input, status, attempts,
                       first_claimed_at, started_at)
    SELECT id, 1, 'parked', '{}', 'parked', 1, now(), now() FROM made
    RETURNING id, session_id
), asked AS (
    INSERT INTO steps (session_id, turn_id, step_key, kind, status, request_digest, lease_epoch)
    SELECT session_id, id, 'ask', 'answer', 'started', 'seeded', 0 FROM parked
    RETURNING 1
)
SELECT count(*) AS count FROM asked

-- name: turns_pruned
-- Turns retention has removed so far (they finished before it did).
SELECT coalesce(sum(turns_pruned), 0)::bigint AS count FROM sessions

-- name: sessions_seed_ready
-- A load-test fixture: %(count)s sessions, each with one queued turn of input
-- %(input)s, ready in creation order (a backlog for a throughput run; enqueued
-- one by one they would measure the producer, not the workers).
-- READ COMMITTED is no concern: it writes new rows only, before workers run.
WITH made AS (
    INSERT INTO sessions (status, queued_turns, last_turn_seq, ready_at)
    SELECT 'ready', 1, 1, clock_timestamp() FROM generate_series(1, %(count)s)
    RETURNING id
), queued AS (
    INSERT INTO turns (session_id, seq, idempotency_key, input)
    SELECT id, 1, 'seeded', %(input)s FROM made
    RETURNING 1
)
SELECT count(*) AS count FROM queued

-- name: quota_waits_in_place
-- Seconds each committed model call waited for quota in its slot (the step's
-- recorded quota_wait_s), for calls that waited at all.
SELECT (result->>'quota_wait_s')::float8 AS seconds
FROM steps
WHERE kind = 'model' AND status = 'committed' AND (result->>'quota_wait_s')::float8 > 0

-- name: quota_deferral_waits
-- The not-before distance of each hand-back for quota (turn.deferred's wait_s).
SELECT (payload->>'wait_s')::float8 AS seconds FROM events WHERE kind = 'turn.deferred'

-- name: delegation_sample
-- One sample of a delegation run (stint/lab/delegation.py) under %(root)s: its
-- descendants running now, and the sessions of the tree that hold a slot
-- although their join began (running, a wait.started in their log, a child
-- running): none is the claim that a joining parent waits slot-free.
WITH RECURSIVE tree AS (
    SELECT id, status FROM sessions WHERE id = %(root)s
    UNION ALL
    SELECT s.id, s.status FROM sessions s JOIN tree ON s.parent_id = tree.id
)
SELECT count(*) FILTER (WHERE tree.id <> %(root)s AND tree.status = 'running') AS running,
       count(*) FILTER (
           WHERE tree.status = 'running'
             AND EXISTS (SELECT FROM events e
                         WHERE e.session_id = tree.id AND e.kind = 'wait.started')
             AND EXISTS (SELECT FROM sessions c
                         WHERE c.parent_id = tree.id AND c.status = 'running')
       ) AS holding
FROM tree

-- name: delegation_levels
-- Per level below %(root)s (1: its children, 2: theirs ...): children spawned,
-- ended (their spawned turn finished, any way) and succeeded.
WITH RECURSIVE tree AS (
    SELECT c.child_id, c.child_turn_id, 1 AS level FROM children c WHERE c.parent_id = %(root)s
    UNION ALL
    SELECT c.child_id, c.child_turn_id, tree.level + 1
    FROM children c JOIN tree ON c.parent_id = tree.child_id
    WHERE tree.level < 64
)
SELECT tree.level,
       count(*) AS spawned,
       count(*) FILTER (WHERE t.status IN ('succeeded', 'failed', 'cancelled', 'interrupted'))
           AS ended,
       count(*) FILTER (WHERE t.status = 'succeeded') AS succeeded
FROM tree
LEFT JOIN turns t ON t.id = tree.child_turn_id
GROUP BY tree.level
ORDER BY tree.level

-- name: turn_outcome
-- One turn's status, and its enqueue-to-finish seconds once it finished (database clock).
SELECT status, finished_at IS NOT NULL AS finished,
       extract(epoch FROM finished_at - enqueued_at)::float8 AS seconds
FROM turns
WHERE id = %(turn_id)s

-- name: delegation_phases
-- Where a delegation's end-to-end time went (seconds from the root turn's
-- enqueue, database clock): its last child.started (every spawn of the root
-- done), the first and the last start of a descendant's turn, the last end
-- of one; and the root's tail, from that last end to its own finish (the
-- report, the wake, the claim and the replay).
WITH RECURSIVE tree AS (
    SELECT c.child_id, c.child_turn_id, 1 AS level FROM children c WHERE c.parent_id = %(root)s
    UNION ALL
    SELECT c.child_id, c.child_turn_id, tree.level + 1
    FROM children c JOIN tree ON c.parent_id = tree.child_id
    WHERE tree.level < 64
), below AS (
    SELECT min(t.first_claimed_at) AS first_start, max(t.first_claimed_at) AS last_start,
           max(t.finished_at) AS last_end
    FROM tree JOIN turns t ON t.id = tree.child_turn_id
)
SELECT extract(epoch FROM (SELECT max(e.created_at) FROM events e
                           WHERE e.session_id = %(root)s AND e.kind = 'child.started')
                          - r.enqueued_at)::float8 AS spawned_s,
       extract(epoch FROM below.first_start - r.enqueued_at)::float8 AS first_start_s,
       extract(epoch FROM below.last_start - r.enqueued_at)::float8 AS last_start_s,
       extract(epoch FROM below.last_end - r.enqueued_at)::float8 AS last_end_s,
       extract(epoch FROM r.finished_at - below.last_end)::float8 AS root_tail_s
FROM turns r, below
WHERE r.id = %(turn_id)s
