-- name: leader_hold
-- Hold (or renew) the leadership %(job)s for %(ttl)s seconds: taken when the row
-- is ours or has expired (its holder died or resigned). No row back: another
-- process holds it. One tiny row per job, whatever the number of candidates.
INSERT INTO leaders (name, holder, expires_at)
VALUES (%(job)s, %(holder)s, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (name) DO UPDATE
SET holder     = excluded.holder,
    expires_at = excluded.expires_at,
    since      = CASE WHEN leaders.holder = excluded.holder THEN leaders.since ELSE now() END
WHERE leaders.holder = excluded.holder OR leaders.expires_at < now()
RETURNING holder

-- name: leader_resign
-- Give the leadership up at once (a draining worker), so another candidate
-- takes it at its next attempt instead of after the expiry.
UPDATE leaders
SET expires_at = now() - interval '1 second'
WHERE name = %(job)s AND holder = %(holder)s

-- name: leader_get
SELECT holder, since, expires_at > now() AS live
FROM leaders
WHERE name = %(job)s

-- name: stats_sample_take
-- The elected sampler's reading, written into the ring of %(keep)s slots. Each
-- figure comes from an index: ready sessions (sessions_ready_idx), open turns
-- by status (turns_open_idx), held sessions (sessions_lease_owner_idx), turns
-- finished since the previous sample (turns_finished_idx), and the small
-- workers table; nothing scans a whole table. Safe under READ COMMITTED: the
-- counts are a reading of one snapshot (approximate by nature) and the write
-- is one ring slot by key, by the elected sampler only.
WITH moment AS (
    SELECT now() AS at
), prev AS (
    SELECT at, n FROM stats_samples ORDER BY n DESC LIMIT 1
), since AS (
    SELECT coalesce((SELECT at FROM prev), moment.at - make_interval(secs => %(window_seconds)s))
               AS at
    FROM moment
), open_turns AS (
    SELECT count(*) FILTER (WHERE status = 'queued') AS queued,
           count(*) FILTER (WHERE status = 'running') AS running,
           count(*) FILTER (WHERE status = 'parked') AS parked
    FROM turns
    WHERE status IN ('queued', 'running', 'parked')
), ready AS (
    -- A session handed back for quota until a later ready_at is counted ready,
    -- but does not wait for a slot yet: it is not the oldest.
    SELECT count(*) AS sessions,
           extract(epoch FROM now() - min(ready_at) FILTER (WHERE ready_at <= now()))::float8
               AS oldest_age
    FROM sessions
    WHERE status = 'ready'
), fleet AS (
    SELECT count(*) AS live_workers, coalesce(sum(slots), 0) AS total_slots
    FROM workers
    WHERE state = 'running'
      AND heartbeat_at > now() - make_interval(secs => coalesce(lease_seconds, %(live_seconds)s))
), busy AS (
    SELECT count(*) AS slots FROM sessions WHERE lease_owner IS NOT NULL
), finished AS (
    SELECT count(*) AS turns, count(*) FILTER (WHERE t.status = 'failed') AS failed
    FROM turns t, since, moment
    WHERE t.finished_at IS NOT NULL AND t.finished_at > since.at AND t.finished_at <= moment.at
)
INSERT INTO stats_samples AS s (
    slot, n, at, sampled_by, window_seconds, ready_sessions, queued_turns, running_turns,
    parked_turns, oldest_ready_age, live_workers, total_slots, busy_slots, turns_finished,
    turns_failed
)
SELECT (coalesce(prev.n, 0) + 1) %% %(keep)s, coalesce(prev.n, 0) + 1, moment.at, %(holder)s,
       greatest(extract(epoch FROM moment.at - since.at), 0.001),
       ready.sessions, open_turns.queued, open_turns.running, open_turns.parked,
       ready.oldest_age, fleet.live_workers, fleet.total_slots, busy.slots,
       finished.turns, finished.failed
FROM moment
CROSS JOIN since
CROSS JOIN open_turns
CROSS JOIN ready
CROSS JOIN fleet
CROSS JOIN busy
CROSS JOIN finished
LEFT JOIN prev ON true
ON CONFLICT (slot) DO UPDATE
SET n = excluded.n, at = excluded.at, sampled_by = excluded.sampled_by,
    window_seconds = excluded.window_seconds, ready_sessions = excluded.ready_sessions,
    queued_turns = excluded.queued_turns, running_turns = excluded.running_turns,
    parked_turns = excluded.parked_turns, oldest_ready_age = excluded.oldest_ready_age,
    live_workers = excluded.live_workers, total_slots = excluded.total_slots,
    busy_slots = excluded.busy_slots, turns_finished = excluded.turns_finished,
    turns_failed = excluded.turns_failed
RETURNING /*include:stats_sample_columns*/

-- name: stats_sample_columns
-- Fragment: a sample as readers see it, from stats_samples s.
s.n, s.at, s.sampled_by, s.window_seconds::float8 AS window_seconds, s.ready_sessions,
s.queued_turns, s.running_turns, s.parked_turns, s.oldest_ready_age::float8 AS oldest_ready_age,
s.live_workers, s.total_slots, s.busy_slots, s.turns_finished, s.turns_failed,
extract(epoch FROM now() - s.at)::float8 AS age

-- name: stats_samples_recent
-- The newest %(limit)s samples, newest first.
SELECT /*include:stats_sample_columns*/
FROM stats_samples s
ORDER BY s.n DESC
LIMIT %(limit)s
