-- name: checks_tick_duplicates
-- Schedule ticks whose turn was enqueued more than once: a tick's turn carries the tick's
-- key (schedule:<id>:<tick time>), on its own session or the schedule's, so a key seen on
-- two turns is a tick run twice.
SELECT idempotency_key AS key, count(*) AS turns
FROM turns
WHERE idempotency_key LIKE 'schedule:%%'
GROUP BY idempotency_key
HAVING count(*) > 1
ORDER BY idempotency_key
LIMIT 20

-- name: checks_tick_turns_missing
-- Ticks recorded as enqueued whose turn does not exist (retention aside): a tick lost
-- after it was recorded.
SELECT t.schedule_id, t.tick_at, t.turn_id
FROM schedule_ticks t
WHERE t.outcome = 'enqueued'
  AND NOT EXISTS (SELECT FROM turns x WHERE x.id = t.turn_id)
  AND NOT EXISTS (SELECT FROM sessions s WHERE s.id = t.session_id AND s.turns_pruned > 0)
ORDER BY t.tick_at
LIMIT 20

-- name: checks_outbox_missing
-- Events of a subscribed kind, appended in a subscribed tenant's session after the
-- endpoint was last changed (plus a second, for statements that began before it
-- committed), with no delivery: an outbox row lost. Endpoints disabled now are left out
-- (events while disabled get no delivery, by design).
SELECT w.id AS endpoint_id, e.session_id, e.seq, e.kind
FROM webhook_endpoints w
JOIN sessions s ON s.tenant = w.tenant
JOIN events e ON e.session_id = s.id AND e.kind = ANY (w.kinds)
             AND e.created_at > w.updated_at + interval '1 second'
WHERE w.disabled_at IS NULL
  AND NOT EXISTS (SELECT FROM webhook_deliveries d
                  WHERE d.endpoint_id = w.id AND d.session_id = e.session_id AND d.seq = e.seq)
ORDER BY e.created_at
LIMIT 20

-- name: checks_delivery_duplicates
-- One event delivered to one endpoint under two delivery ids.
SELECT endpoint_id, session_id, seq, count(*) AS deliveries
FROM webhook_deliveries
GROUP BY endpoint_id, session_id, seq
HAVING count(*) > 1
LIMIT 20

-- name: checks_automation_totals
SELECT (SELECT count(*) FROM schedule_ticks) AS ticks,
       (SELECT count(*) FROM webhook_deliveries) AS deliveries,
       (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending') AS pending_deliveries
