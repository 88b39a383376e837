-- name: webhook_columns
-- Fragment: an endpoint as every door shows it (never its secret), from webhook_endpoints w.
w.id, w.tenant, w.url, w.kinds, w.description, w.failing_since, w.disabled_at,
w.disabled_reason, w.created_at, w.updated_at

-- name: webhooks_insert
-- A new endpoint; its id is chosen by the caller, who sealed the secret with it.
INSERT INTO webhook_endpoints AS w (id, tenant, url, kinds, description, secret_cipher, key_id)
VALUES (%(id)s, %(tenant)s, %(url)s, %(kinds)s, %(description)s, %(secret_cipher)s, %(key_id)s)
RETURNING /*include:webhook_columns*/

-- name: webhooks_list
-- Every endpoint, or one tenant's when %(tenant)s is set.
SELECT /*include:webhook_columns*/
FROM webhook_endpoints w
WHERE %(tenant)s::text IS NULL OR w.tenant = %(tenant)s
ORDER BY w.tenant, w.created_at, w.id
LIMIT %(limit)s

-- name: webhooks_get
SELECT /*include:webhook_columns*/
FROM webhook_endpoints w
WHERE w.id = %(endpoint_id)s AND (%(tenant)s::text IS NULL OR w.tenant = %(tenant)s)

-- name: webhooks_delete
-- Delete an endpoint with its delivery log. Safe under READ COMMITTED: the endpoint's
-- DELETE re-checks its row; its deliveries are deleted by key (a delivery an event
-- statement adds for it afterwards, from an older snapshot, is never claimed: claims join
-- live endpoints; retention removes it).
WITH gone AS (
    DELETE FROM webhook_endpoints w
    WHERE w.id = %(endpoint_id)s AND (%(tenant)s::text IS NULL OR w.tenant = %(tenant)s)
    RETURNING /*include:webhook_columns*/
), gone_deliveries AS (
    DELETE FROM webhook_deliveries d
    USING gone
    WHERE d.endpoint_id = gone.id
)
SELECT * FROM gone

-- name: webhooks_enable
-- Enable an endpoint again (after it was disabled for failing): its failure clock restarts.
-- Deliveries still pending are tried again from now.
WITH enabled AS (
    UPDATE webhook_endpoints w
    SET disabled_at = NULL, disabled_reason = NULL, failing_since = NULL, updated_at = now()
    WHERE w.id = %(endpoint_id)s AND (%(tenant)s::text IS NULL OR w.tenant = %(tenant)s)
    RETURNING /*include:webhook_columns*/
), retried AS (
    -- Safe under READ COMMITTED: an UPDATE by key that re-checks status on each row's
    -- newest version; a delivery in flight keeps its claim (its next_attempt_at only moves
    -- earlier, and its record is fenced by the attempt number).
    UPDATE webhook_deliveries d
    SET next_attempt_at = least(d.next_attempt_at, now())
    FROM enabled
    WHERE d.endpoint_id = enabled.id AND d.status = 'pending'
)
SELECT * FROM enabled

-- name: webhook_deliveries_list
-- An endpoint's delivery log, newest first, optionally of one status.
SELECT d.id, d.endpoint_id, d.session_id, d.seq, d.kind, d.status, d.attempts,
       d.next_attempt_at, d.last_attempt_at, d.last_status_code, d.last_error,
       d.created_at, d.delivered_at
FROM webhook_deliveries d
WHERE d.endpoint_id = %(endpoint_id)s
  AND (%(status)s::text IS NULL OR d.status = %(status)s)
ORDER BY d.created_at DESC, d.id DESC
LIMIT %(limit)s

-- name: webhook_claim
-- A deliverer takes up to %(limit)s due, pending deliveries of enabled endpoints, counts
-- the attempt and moves next_attempt_at a claim lease ahead: if this worker dies, another
-- takes the delivery again once the lease passes (same id). It reads what the request
-- needs: the endpoint's URL and sealed secret, and the event (null once pruned).
-- Safe under READ COMMITTED: picked locks with SKIP LOCKED and re-checks status and
-- next_attempt_at on each row's newest version, so a delivery another deliverer claimed
-- or settled since the snapshot is not taken; the UPDATE writes only the locked rows. The
-- endpoint is read in the snapshot: one disabled a moment ago may get one more attempt.
WITH picked AS (
    SELECT d.id, w.tenant, w.url, w.secret_cipher, w.key_id,
           e.turn_id, e.payload, e.created_at AS event_at
    FROM webhook_deliveries d
    JOIN webhook_endpoints w ON w.id = d.endpoint_id AND w.disabled_at IS NULL
    LEFT JOIN events e ON e.session_id = d.session_id AND e.seq = d.seq
    WHERE d.status = 'pending' AND d.next_attempt_at <= now()
    ORDER BY d.next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_deliveries d
SET attempts = d.attempts + 1,
    next_attempt_at = now() + make_interval(secs => %(lease_seconds)s),
    last_attempt_at = now(),
    claimed_by = %(worker)s
FROM picked
WHERE d.id = picked.id
RETURNING d.id, d.endpoint_id, d.attempts, d.kind, d.session_id, d.seq, picked.tenant,
          picked.url, picked.secret_cipher, picked.key_id, picked.turn_id, picked.payload,
          picked.event_at

-- name: webhook_record
-- The outcome of one attempt, written only if the delivery is still pending at that
-- attempt (a worker whose claim lease ran out, and whose delivery another worker took
-- again, changes nothing). %(outcome)s: delivered, retry (pending again at
-- %(retry_seconds)s from now) or failed (the last attempt). The endpoint's failure clock:
-- a success clears failing_since; a failure starts it, and disables the endpoint once
-- it has run longer than %(disable_after_seconds)s.
-- Safe under READ COMMITTED: both are UPDATEs by key that re-check their conditions on
-- the row's newest version (the attempt and status; the endpoint's failing_since), and
-- decide only from those rows.
WITH done AS (
    UPDATE webhook_deliveries d
    SET status = CASE %(outcome)s::text WHEN 'retry' THEN 'pending' ELSE %(outcome)s::text END,
        next_attempt_at = CASE WHEN %(outcome)s::text = 'retry'
                               THEN now() + make_interval(secs => %(retry_seconds)s)
                               ELSE d.next_attempt_at END,
        delivered_at = CASE WHEN %(outcome)s::text = 'delivered' THEN now() END,
        last_status_code = %(status_code)s,
        last_error = %(error)s
    WHERE d.id = %(delivery_id)s AND d.attempts = %(attempt)s AND d.status = 'pending'
    RETURNING d.endpoint_id
), endpoint AS (
    UPDATE webhook_endpoints w
    SET failing_since = CASE WHEN %(outcome)s::text = 'delivered' THEN NULL
                             ELSE coalesce(w.failing_since, now()) END,
        disabled_at = CASE WHEN %(outcome)s::text <> 'delivered' AND w.disabled_at IS NULL
                                AND w.failing_since
                                    < now() - make_interval(secs => %(disable_after_seconds)s)
                           THEN now() ELSE w.disabled_at END,
        disabled_reason = CASE WHEN %(outcome)s::text <> 'delivered' AND w.disabled_at IS NULL
                                    AND w.failing_since
                                        < now() - make_interval(secs => %(disable_after_seconds)s)
                               THEN 'every delivery failed since '
                                    || to_char(w.failing_since AT TIME ZONE 'UTC',
                                               'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                               ELSE w.disabled_reason END,
        updated_at = now()
    FROM done
    WHERE w.id = done.endpoint_id
      AND (w.failing_since IS NOT NULL OR %(outcome)s::text <> 'delivered')
    RETURNING w.disabled_at IS NOT NULL AS disabled
)
SELECT EXISTS (SELECT FROM done) AS recorded,
       coalesce((SELECT disabled FROM endpoint), false) AS disabled

-- name: webhook_next_due
-- Seconds until the earliest pending delivery is due (negative: overdue; null: none).
SELECT extract(epoch FROM min(d.next_attempt_at) - now())::float8 AS seconds
FROM webhook_deliveries d
WHERE d.status = 'pending'
  AND EXISTS (SELECT FROM webhook_endpoints w WHERE w.id = d.endpoint_id AND w.disabled_at IS NULL)

-- name: prune_webhook_deliveries
-- Retention: up to %(batch)s deliveries older than the horizon go, whatever their status
-- (their events are gone by then too). Safe under READ COMMITTED: the DELETE re-checks
-- each row's age on its newest version; one worker prunes an interval (maintenance_take).
WITH gone AS (
    DELETE FROM webhook_deliveries d
    WHERE d.id IN (SELECT x.id FROM webhook_deliveries x
                   WHERE x.created_at < now() - make_interval(secs => %(horizon_seconds)s)
                   LIMIT %(batch)s)
      AND d.created_at < now() - make_interval(secs => %(horizon_seconds)s)
    RETURNING 1
)
SELECT count(*) AS count FROM gone
