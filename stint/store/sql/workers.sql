-- name: workers_register
-- Register, or take over the row of an earlier process with this id -- but
-- never from a live one (not stopped, heartbeat younger than its lease): two
-- processes with one id would renew each other's leases. No row back means
-- the id is in use; workers_holder says by whom. A registration tells every
-- worker to read its roster again (%(roster_changed)s on the work channel).
-- Safe under READ COMMITTED: ON CONFLICT locks the existing row and its WHERE
-- re-reads that row's newest version (state, heartbeat, pid); nothing else is
-- read, and the NOTIFY goes out only for the row written.
WITH registered AS (
    INSERT INTO workers (id, host, pid, version, pins, slots, lease_seconds)
    VALUES (%(id)s, %(host)s, %(pid)s, %(version)s, %(pins)s, %(slots)s, %(lease_seconds)s)
    ON CONFLICT (id) DO UPDATE
    SET host = excluded.host, pid = excluded.pid, version = excluded.version,
        pins = excluded.pins, slots = excluded.slots, lease_seconds = excluded.lease_seconds,
        state = 'running', started_at = now(), heartbeat_at = now(), stopped_at = NULL
    WHERE workers.state = 'stopped'
       OR workers.heartbeat_at <= now() - make_interval(secs => coalesce(workers.lease_seconds, 0))
       OR (workers.host = excluded.host AND workers.pid = excluded.pid)
    RETURNING id
)
SELECT id, pg_notify(%(work_channel)s, %(roster_changed)s) IS NULL AS notified FROM registered

-- name: workers_holder
SELECT host, pid, extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age,
       lease_seconds::float8 AS lease_seconds
FROM workers
WHERE id = %(id)s

-- name: workers_set_state
-- A worker draining or stopped leaves the others' rosters: they are told to read
-- them again (%(roster_changed)s on the work channel).
-- Safe under READ COMMITTED: it updates only its own row, matched on id and pid
-- re-checked at the row's newest version after any lock wait, and reads nothing else.
WITH changed AS (
    UPDATE workers
    SET state = %(state)s,
        stopped_at = CASE WHEN %(state)s = 'stopped' THEN now() END,
        heartbeat_at = now()
    WHERE id = %(id)s AND pid = %(pid)s
    RETURNING id
)
SELECT id, pg_notify(%(work_channel)s, %(roster_changed)s) IS NULL AS notified FROM changed

-- name: workers_list
-- A worker not stopped whose heartbeat is older than its lease is dead (killed,
-- or cut off): it holds no lease any more, whatever its row's state says.
SELECT w.id, w.state, w.slots, w.pid, w.host, w.version, w.pins,
       extract(epoch FROM now() - w.heartbeat_at)::float8 AS heartbeat_age,
       w.state = 'stopped'
           OR w.heartbeat_at > now() - make_interval(
                  secs => coalesce(w.lease_seconds, %(live_seconds)s)) AS alive,
       (SELECT count(*) FROM sessions s WHERE s.lease_owner = w.id) AS active
FROM workers w
WHERE w.state <> 'stopped' OR w.stopped_at > now() - interval '10 minutes'
ORDER BY w.started_at, w.id

-- name: workers_capacity
-- Live workers (heartbeat within %(live_seconds)s) and their slots: what a
-- tenant may see of the fleet (no hosts, pids or ids).
SELECT count(*) AS live_workers, coalesce(sum(slots), 0)::bigint AS live_slots
FROM workers
WHERE state = 'running' AND heartbeat_at > now() - make_interval(secs => %(live_seconds)s)


-- name: workers_peers
-- The live running workers and the pins each accepts, in id order: every worker
-- reads the same list (up to a refresh apart) and so picks the same one to wake
-- for a session's notification (stint/worker/roster.py). A read: nothing locked.
SELECT id AS worker_id, pins
FROM workers
WHERE state = 'running'
  AND heartbeat_at > now() - make_interval(secs => coalesce(lease_seconds, %(live_seconds)s))
ORDER BY id

-- name: work_nudge
-- Wake every worker's claimer: a notification picked this worker, which cannot
-- claim now (slots full, stopping), and passes it on to all.
SELECT pg_notify(%(work_channel)s, '') IS NULL AS notified
