-- name: quota_columns
-- Fragment: a scope as an operator sees it, from quota_scopes q, with what
-- occupies its window now (open requests, and settled ones for a window after
-- they settled: the window the reservations are checked against).
q.scope, q.rpm, q.tpm, q.concurrency, q.window_seconds::float8 AS window_seconds,
q.requests_reserved, q.requests_reconciled, q.requests_unknown, q.requests_in_flight,
q.tokens_reserved, q.tokens_reconciled, q.tokens_refunded, q.tokens_debt, q.tokens_unknown,
q.tokens_in_flight, q.deferrals,
(SELECT count(*) FROM quota_reservations r
 WHERE r.scope = q.scope
   AND (r.state = 'reserved'
        OR r.settled_at > now() - make_interval(secs => q.window_seconds))) AS window_requests,
(SELECT coalesce(sum(CASE WHEN r.state = 'reconciled' THEN r.actual_tokens
                          ELSE r.estimated_tokens END), 0)
 FROM quota_reservations r
 WHERE r.scope = q.scope
   AND (r.state = 'reserved'
        OR r.settled_at > now() - make_interval(secs => q.window_seconds)))::bigint
    AS window_tokens

-- name: quota_set
-- Create a scope or change its limits. A limit whose set_ flag is false
-- keeps its current value (NULL for a new scope: unlimited); the counters
-- are never touched.
INSERT INTO quota_scopes AS q (scope, rpm, tpm, concurrency, window_seconds)
VALUES (%(scope)s, %(rpm)s, %(tpm)s, %(concurrency)s, coalesce(%(window_seconds)s, 60))
ON CONFLICT (scope) DO UPDATE
SET rpm            = CASE WHEN %(set_rpm)s THEN excluded.rpm ELSE q.rpm END,
    tpm            = CASE WHEN %(set_tpm)s THEN excluded.tpm ELSE q.tpm END,
    concurrency    = CASE WHEN %(set_concurrency)s THEN excluded.concurrency
                          ELSE q.concurrency END,
    window_seconds = coalesce(%(window_seconds)s, q.window_seconds),
    updated_at     = now()
RETURNING (xmax = 0) AS created

-- name: quota_list
-- Every scope, or the one named by %(scope)s, in name order.
SELECT /*include:quota_columns*/
FROM quota_scopes q
WHERE %(scope)s::text IS NULL OR q.scope = %(scope)s
ORDER BY q.scope

-- name: quota_delete
-- A scope and its ledger go; workers naming it then fail their model calls
-- with a clear error until it is set again.
DELETE FROM quota_scopes WHERE scope = %(scope)s RETURNING scope

-- name: quota_lock_scope
-- Sent before quota_reserve in the same transaction: once this statement
-- holds %(scope)s's row lock, the next statement's snapshot (READ COMMITTED
-- takes one per statement) holds every reservation and settlement committed
-- by whoever held the lock before, and none can commit until we do.
SELECT scope FROM quota_scopes WHERE scope = %(scope)s FOR UPDATE

-- name: quota_reserve
-- Reserve one request and %(estimate)s tokens in %(scope)s's window for the
-- provider request %(key)s, or refuse and say how long until enough frees.
-- Safe under READ COMMITTED only after quota_lock_scope in the same
-- transaction: a FOR UPDATE waited for inside this statement would re-read
-- the scope row alone, and the window below would be counted from the
-- snapshot taken before the wait, without the reservation waited for (the
-- provider then saw 8 requests in a window of 6). With the lock already held,
-- the scope CTE waits for nothing and every CTE reads one current snapshot:
-- reservations of every worker are serialised per scope, each counting all
-- that came before. A row occupies
-- the window from reservation until a window after it settles, counted at
-- its reported usage once reconciled and at its estimate before (or when
-- unknown), so a request admitted now reaches the provider a full window
-- after every request the window no longer counts was answered. Open
-- reservations whose holder lost its lease or whose turn is no longer
-- running (a crash, a takeover) are settled unknown here. The same key
-- reserved before is granted again without counting (a retried statement).
-- wait_seconds is NULL when what must free is still in flight (its end is
-- not known); too_big when %(estimate)s exceeds the whole tpm.
WITH scope AS MATERIALIZED (
    SELECT q.scope, q.rpm, q.tpm, q.concurrency
    FROM quota_scopes q
    WHERE q.scope = %(scope)s
    FOR UPDATE
), stamp AS MATERIALIZED (
    SELECT clock_timestamp() AS at, make_interval(secs => q.window_seconds) AS width
    FROM quota_scopes q
    JOIN scope ON scope.scope = q.scope
), earlier AS (
    SELECT r.key
    FROM quota_reservations r
    JOIN scope ON scope.scope = r.scope
    WHERE r.key = %(key)s
), open AS MATERIALIZED (
    SELECT r.key, r.estimated_tokens,
           EXISTS (
               SELECT
               FROM sessions s
               JOIN turns t ON t.id = r.turn_id
               WHERE s.id = r.session_id AND s.lease_epoch = r.lease_epoch
                 AND s.status = 'running' AND s.lease_expires_at > stamp.at
                 AND t.status = 'running'
           ) AS live
    FROM quota_reservations r, scope, stamp
    WHERE r.scope = scope.scope AND r.state = 'reserved'
), orphaned AS (
    UPDATE quota_reservations r
    SET state = 'unknown', settled_at = stamp.at
    FROM open, stamp
    WHERE r.scope = %(scope)s AND r.key = open.key AND NOT open.live
    RETURNING r.estimated_tokens
), occupying AS (
    SELECT CASE WHEN open.live THEN 'infinity'::timestamptz
                ELSE stamp.at + stamp.width END AS until,
           open.estimated_tokens AS tokens, open.live
    FROM open, stamp
    UNION ALL
    SELECT r.settled_at + stamp.width,
           CASE WHEN r.state = 'reconciled' THEN r.actual_tokens ELSE r.estimated_tokens END,
           false
    FROM quota_reservations r, scope, stamp
    WHERE r.scope = scope.scope AND r.state <> 'reserved'
      AND r.settled_at > stamp.at - stamp.width
), used AS (
    SELECT count(*) AS requests, coalesce(sum(tokens), 0) AS tokens,
           count(*) FILTER (WHERE live) AS live
    FROM occupying
), verdict AS (
    SELECT scope.rpm, scope.tpm, used.requests, used.tokens,
           scope.rpm IS NULL OR used.requests < scope.rpm AS rpm_ok,
           scope.tpm IS NULL OR used.tokens + %(estimate)s <= scope.tpm AS tpm_ok,
           scope.concurrency IS NULL OR used.live < scope.concurrency AS concurrency_ok,
           coalesce(%(estimate)s > scope.tpm, false) AS too_big
    FROM scope, used
), granted AS (
    INSERT INTO quota_reservations
        (scope, key, session_id, turn_id, lease_epoch, estimated_tokens, reserved_at)
    SELECT %(scope)s, %(key)s, %(session_id)s, %(turn_id)s, %(epoch)s, %(estimate)s, stamp.at
    FROM verdict, stamp
    WHERE verdict.rpm_ok AND verdict.tpm_ok AND verdict.concurrency_ok
      AND NOT EXISTS (SELECT FROM earlier)
    RETURNING estimated_tokens
), counted AS (
    UPDATE quota_scopes q
    SET requests_reserved  = q.requests_reserved + (SELECT count(*) FROM granted),
        tokens_reserved    = q.tokens_reserved
                             + (SELECT coalesce(sum(estimated_tokens), 0) FROM granted),
        requests_in_flight = q.requests_in_flight + (SELECT count(*) FROM granted)
                             - (SELECT count(*) FROM orphaned),
        tokens_in_flight   = q.tokens_in_flight
                             + (SELECT coalesce(sum(estimated_tokens), 0) FROM granted)
                             - (SELECT coalesce(sum(estimated_tokens), 0) FROM orphaned),
        requests_unknown   = q.requests_unknown + (SELECT count(*) FROM orphaned),
        tokens_unknown     = q.tokens_unknown
                             + (SELECT coalesce(sum(estimated_tokens), 0) FROM orphaned)
    FROM scope
    WHERE q.scope = scope.scope
), ranked AS (
    SELECT until, row_number() OVER w AS n, sum(tokens) OVER w AS freed
    FROM occupying
    WINDOW w AS (ORDER BY until ROWS UNBOUNDED PRECEDING)
), frees AS (
    -- The earliest moment every refusing limit has room: enough of the oldest
    -- rows gone for rpm, enough of their tokens gone for tpm; a full
    -- concurrency frees only when a call in flight ends (not known).
    SELECT greatest(
               (SELECT min(ranked.until) FROM ranked
                WHERE NOT verdict.rpm_ok AND ranked.n >= verdict.requests + 1 - verdict.rpm),
               (SELECT min(ranked.until) FROM ranked
                WHERE NOT verdict.tpm_ok
                  AND ranked.freed >= verdict.tokens + %(estimate)s - verdict.tpm),
               CASE WHEN NOT verdict.concurrency_ok THEN 'infinity'::timestamptz END
           ) AS at
    FROM verdict
)
SELECT EXISTS (SELECT FROM granted) OR EXISTS (SELECT FROM earlier) AS granted,
       verdict.too_big,
       CASE WHEN frees.at < 'infinity'::timestamptz
            THEN greatest(extract(epoch FROM frees.at - stamp.at)::float8, 0) END AS wait_seconds
FROM verdict, frees, stamp

-- name: quota_settle
-- The provider request %(key)s ended: reconciled with the %(actual)s tokens
-- the provider reported (the over-estimate refunded, the under-estimate
-- debt), or unknown when %(actual)s is NULL (its estimate stays counted).
-- The scope row is locked first, in the order quota_reserve takes them.
-- Settling twice, or a reservation already found orphaned, changes nothing.
-- Safe under READ COMMITTED: the reservation's UPDATE re-checks state =
-- 'reserved' on its newest version after the lock, and the counters are
-- updated on the locked scope row; no decision reads the snapshot elsewhere.
WITH scope AS MATERIALIZED (
    SELECT scope FROM quota_scopes WHERE scope = %(scope)s FOR UPDATE
), settled AS (
    UPDATE quota_reservations r
    SET state         = CASE WHEN %(actual)s::bigint IS NULL THEN 'unknown' ELSE 'reconciled' END,
        actual_tokens = %(actual)s,
        settled_at    = clock_timestamp()
    FROM scope
    WHERE r.scope = scope.scope AND r.key = %(key)s AND r.state = 'reserved'
    RETURNING r.estimated_tokens AS estimate, r.actual_tokens AS actual
), counted AS (
    UPDATE quota_scopes q
    SET requests_in_flight  = q.requests_in_flight - 1,
        tokens_in_flight    = q.tokens_in_flight - settled.estimate,
        requests_reconciled = q.requests_reconciled + (settled.actual IS NOT NULL)::int,
        tokens_reconciled   = q.tokens_reconciled + coalesce(settled.actual, 0),
        tokens_refunded     = q.tokens_refunded
                              + coalesce(greatest(settled.estimate - settled.actual, 0), 0),
        tokens_debt         = q.tokens_debt
                              + coalesce(greatest(settled.actual - settled.estimate, 0), 0),
        requests_unknown    = q.requests_unknown + (settled.actual IS NULL)::int,
        tokens_unknown      = q.tokens_unknown
                              + CASE WHEN settled.actual IS NULL THEN settled.estimate ELSE 0 END
    FROM settled
    WHERE q.scope = %(scope)s
    RETURNING 1
)
SELECT count(*) AS settled FROM counted
