-- name: workers_register
INSERT INTO workers (id, host, pid, version, pins, slots)
VALUES (%(id)s, %(host)s, %(pid)s, %(version)s, %(pins)s, %(slots)s)
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, version = excluded.version,
    pins = excluded.pins, slots = excluded.slots, state = 'running',
    started_at = now(), heartbeat_at = now(), stopped_at = NULL

-- name: workers_set_state
UPDATE workers
SET state = %(state)s,
    stopped_at = CASE WHEN %(state)s = 'stopped' THEN now() END,
    heartbeat_at = now()
WHERE id = %(id)s AND pid = %(pid)s

-- name: workers_list
SELECT w.id, w.state, w.slots, w.pid, w.host, w.version, w.pins,
       extract(epoch FROM now() - w.heartbeat_at)::float8 AS heartbeat_age,
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

