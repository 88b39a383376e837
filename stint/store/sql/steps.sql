-- name: steps_for_turn
SELECT step_key, kind, status, request_digest, result
FROM steps
WHERE session_id = %(session_id)s AND turn_id = %(turn_id)s

-- name: steps_start
-- Record a step as started (before its effect runs), with its events.
WITH /*include:log_new_from_params*/, /*include:log_bump_fenced*/, recorded AS (
    INSERT INTO steps (session_id, turn_id, step_key, kind, status, request_digest, lease_epoch)
    SELECT %(session_id)s, %(turn_id)s, %(step_key)s, %(kind)s, 'started', %(digest)s, %(epoch)s
    FROM log_bump
), /*include:log_append*/
SELECT last_event_seq FROM log_bump

-- name: steps_finish
-- Move a started step to committed (with its result) or unknown, with its events.
WITH /*include:log_new_from_params*/, /*include:log_bump_fenced*/, recorded AS (
    UPDATE steps
    SET status = %(status)s, result = %(result)s, finished_at = clock_timestamp(),
        lease_epoch = %(epoch)s
    WHERE session_id = %(session_id)s AND turn_id = %(turn_id)s AND step_key = %(step_key)s
      AND status = 'started' AND EXISTS (SELECT FROM log_bump)
), /*include:log_append*/
SELECT last_event_seq FROM log_bump
