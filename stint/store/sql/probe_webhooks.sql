-- name: probe_turn_latencies
-- Measurement only (the lab): each finished turn's seconds from enqueue to finish.
SELECT extract(epoch FROM finished_at - enqueued_at)::float8 AS seconds
FROM turns
WHERE finished_at IS NOT NULL

-- name: probe_delivery_lags
-- Measurement only (the lab): each delivered webhook's seconds from its event's append
-- to its delivery.
SELECT extract(epoch FROM d.delivered_at - e.created_at)::float8 AS seconds
FROM webhook_deliveries d
JOIN events e ON e.session_id = d.session_id AND e.seq = d.seq
WHERE d.status = 'delivered'

-- name: probe_deliveries_by_status
SELECT status, count(*) AS count FROM webhook_deliveries GROUP BY status
