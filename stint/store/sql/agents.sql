-- name: messages_recent
-- The last %(limit)s conversation messages of the session from turns before
-- this one (a turn never reads its own, even when a crashed attempt already
-- wrote them), oldest first, and how many such messages exist in all.
WITH mine AS (
    SELECT seq FROM turns WHERE id = %(turn_id)s AND session_id = %(session_id)s
), earlier AS (
    SELECT m.turn_seq, m.idx, m.role, m.message
    FROM conversation_messages m, mine
    WHERE m.session_id = %(session_id)s AND m.turn_seq < mine.seq
), recent AS (
    SELECT * FROM earlier ORDER BY turn_seq DESC, idx DESC LIMIT %(limit)s
)
SELECT (SELECT count(*) FROM earlier) AS total,
       coalesce((SELECT jsonb_agg(jsonb_build_array(role, message) ORDER BY turn_seq, idx)
                 FROM recent), '[]'::jsonb) AS messages

-- name: messages_append
-- Under the lease: record a running turn's messages (one jsonb array, each
-- message's role read from it). Keyed by (session, turn seq, index), so a
-- replayed turn that writes them again changes nothing.
-- No row back: the lease is lost and nothing was written.
-- Safe under READ COMMITTED: the fence is the locked row; the turn's status,
-- read beside it, cannot change under the fence; a key written twice is ignored.
WITH fence AS (
    SELECT id
    FROM sessions
    WHERE /*include:lease_fence*/
    FOR UPDATE
), turn AS (
    SELECT seq
    FROM turns
    WHERE id = %(turn_id)s AND session_id = %(session_id)s AND status = 'running'
), added AS (
    INSERT INTO conversation_messages
        (session_id, turn_seq, idx, turn_id, role, message, lease_epoch)
    SELECT %(session_id)s, turn.seq, (m.ord - 1)::integer, %(turn_id)s,
           m.message ->> 'role', m.message, %(epoch)s
    FROM fence, turn,
         jsonb_array_elements(%(messages)s::jsonb) WITH ORDINALITY AS m (message, ord)
    ON CONFLICT (session_id, turn_seq, idx) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM added) AS added, EXISTS (SELECT FROM turn) AS running
FROM fence

-- name: usage_session
SELECT id AS session_id, status, last_event_seq, parent_id FROM sessions WHERE id = %(session_id)s

-- name: usage_turns
-- Each turn of a session (or just %(turn_id)s) with the usage its committed
-- model steps recorded. Sums of nothing are NULL: not measured, never zero.
SELECT t.id AS turn_id, t.seq, t.status, t.reason, t.attempts, t.worker_id, t.output, t.error,
       t.enqueued_at, t.started_at, t.finished_at,
       count(st.step_key) AS model_calls,
       sum((st.result -> 'usage' ->> 'input_tokens')::bigint)::bigint AS input_tokens,
       sum((st.result -> 'usage' ->> 'output_tokens')::bigint)::bigint AS output_tokens,
       sum((st.result -> 'usage' ->> 'cached_tokens')::bigint)::bigint AS cached_tokens,
       sum((st.result ->> 'retries')::bigint)::bigint AS retries
FROM turns t
LEFT JOIN steps st
       ON st.session_id = t.session_id AND st.turn_id = t.id
      AND st.kind = 'model' AND st.status = 'committed'
WHERE t.session_id = %(session_id)s AND (%(turn_id)s::uuid IS NULL OR t.id = %(turn_id)s)
GROUP BY t.id
ORDER BY t.seq
