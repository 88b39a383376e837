-- name: turns_progress
SELECT count(*) FILTER (WHERE status IN ('succeeded', 'failed', 'cancelled', 'interrupted')),
       count(*),
       (SELECT count(*) FROM sessions WHERE status = 'running')
FROM turns

-- name: turns_timings
-- Per finished turn, from the database clock: end-to-end, queue wait, run time.
SELECT extract(epoch FROM enqueued_at)::float8,
       extract(epoch FROM finished_at)::float8,
       extract(epoch FROM finished_at - enqueued_at)::float8,
       extract(epoch FROM first_claimed_at - enqueued_at)::float8,
       extract(epoch FROM finished_at - started_at)::float8,
       status,
       attempts
FROM turns
WHERE finished_at IS NOT NULL
ORDER BY finished_at
