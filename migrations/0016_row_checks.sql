-- Stint schema 0016: the CHECK constraints of the tables a turn writes, each table's in
-- one function (issue 27: PostgreSQL's CPU per turn): sessions, turns, steps, events,
-- and, for the agents harness, conversation_messages and the quota ledger.
--
-- PostgreSQL does not keep a table's CHECK expressions between statements: every
-- INSERT or UPDATE reads each one back from its stored text (an ARRAY of allowed
-- values is stored byte by byte) and plans it again. sessions has 14, turns 7,
-- steps 4, events 2, and a turn writes each of them several times: measured on a
-- 15,000-row UPDATE loop, sessions' 14 checks cost 23 us a statement (29 us with
-- them, 6.5 us without), and a scripted turn of `make bench` spent 17-30% of its
-- PostgreSQL CPU on them (stringToNode and ExecPrepareExpr under ExecConstraints
-- in a perf profile; docs/benchmarks.md section 8).
--
-- The same conditions, with the same names, now live in one PL/pgSQL function per
-- table, which PostgreSQL compiles once per connection; each table has one CHECK
-- calling it (6.5 us more a statement than no check). A violated condition raises
-- check_violation (23514) naming the old constraint, as PostgreSQL did. As with a
-- CHECK, a condition that is NULL passes. A later migration that changes one of
-- these vocabularies replaces the function (CREATE OR REPLACE, same arguments).
--
-- Adding each CHECK validates the table's rows (the old constraints held them to
-- the same conditions) under the ACCESS EXCLUSIVE lock the migration takes.

CREATE FUNCTION stint_check_violated(relation text, constraint_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"',
        relation, constraint_name
        USING ERRCODE = 'check_violation', TABLE = relation, CONSTRAINT = constraint_name;
END
$$;

CREATE FUNCTION stint_sessions_valid(
    status text, lease_owner text, lease_expires_at timestamptz, ready_at timestamptz,
    control text, control_turn_id uuid, control_requested_at timestamptz,
    parent_id uuid, depth integer, last_event_seq bigint, events_pruned_through bigint,
    last_turn_seq bigint, lease_epoch bigint, queued_turns integer, turns_pruned bigint
) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    failed text := CASE
        WHEN NOT (status = ANY (ARRAY['idle', 'ready', 'running', 'parked', 'closed']))
            THEN 'sessions_status_check'
        WHEN NOT ((status = 'running') = (lease_owner IS NOT NULL)) THEN 'sessions_check'
        WHEN NOT ((lease_owner IS NULL) = (lease_expires_at IS NULL)) THEN 'sessions_check1'
        WHEN NOT (status <> 'ready' OR ready_at IS NOT NULL) THEN 'sessions_check2'
        WHEN NOT (events_pruned_through >= 0 AND events_pruned_through <= last_event_seq)
            THEN 'sessions_check3'
        WHEN NOT (control = ANY (ARRAY['cancel', 'interrupt'])) THEN 'sessions_control_check'
        WHEN NOT ((control IS NULL) = (control_turn_id IS NULL)
                  AND (control IS NULL) = (control_requested_at IS NULL))
            THEN 'sessions_control_complete'
        WHEN NOT (depth >= 0) THEN 'sessions_depth_check'
        WHEN NOT (last_event_seq >= 0) THEN 'sessions_last_event_seq_check'
        WHEN NOT (last_turn_seq >= 0) THEN 'sessions_last_turn_seq_check'
        WHEN NOT (lease_epoch >= 0) THEN 'sessions_lease_epoch_check'
        WHEN NOT ((parent_id IS NULL) = (depth = 0)) THEN 'sessions_parent_depth_check'
        WHEN NOT (queued_turns >= 0) THEN 'sessions_queued_turns_check'
        WHEN NOT (turns_pruned >= 0) THEN 'sessions_turns_pruned_check'
    END;
BEGIN
    IF failed IS NOT NULL THEN
        PERFORM stint_check_violated('sessions', failed);
    END IF;
    RETURN true;
END
$$;

CREATE FUNCTION stint_turns_valid(
    status text, finished_at timestamptz, attempts integer, busy text, seq bigint,
    timeout_seconds real, traceparent text
) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    failed text := CASE
        WHEN NOT (status = ANY (ARRAY['queued', 'running', 'parked', 'succeeded', 'failed',
                                      'cancelled', 'interrupted']))
            THEN 'turns_status_check'
        WHEN NOT ((status = ANY (ARRAY['succeeded', 'failed', 'cancelled', 'interrupted']))
                  = (finished_at IS NOT NULL))
            THEN 'turns_check'
        WHEN NOT (attempts >= 0) THEN 'turns_attempts_check'
        WHEN NOT (busy = ANY (ARRAY['enqueue', 'reject', 'interrupt'])) THEN 'turns_busy_check'
        WHEN NOT (seq > 0) THEN 'turns_seq_check'
        WHEN NOT (timeout_seconds > 0) THEN 'turns_timeout_seconds_check'
        WHEN NOT (traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$')
            THEN 'turns_traceparent_check'
    END;
BEGIN
    IF failed IS NOT NULL THEN
        PERFORM stint_check_violated('turns', failed);
    END IF;
    RETURN true;
END
$$;

CREATE FUNCTION stint_steps_valid(
    kind text, status text, result jsonb, finished_at timestamptz
) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    failed text := CASE
        WHEN NOT (kind = ANY (ARRAY['model', 'tool', 'answer', 'wait', 'spawn']))
            THEN 'steps_kind_check'
        WHEN NOT (status = ANY (ARRAY['started', 'committed', 'unknown']))
            THEN 'steps_status_check'
        WHEN NOT ((status = 'committed') = (result IS NOT NULL)) THEN 'steps_check'
        WHEN NOT ((status = 'started') = (finished_at IS NULL)) THEN 'steps_check1'
    END;
BEGIN
    IF failed IS NOT NULL THEN
        PERFORM stint_check_violated('steps', failed);
    END IF;
    RETURN true;
END
$$;

CREATE FUNCTION stint_events_valid(kind text, seq bigint) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    failed text := CASE
        WHEN NOT (kind = ANY (ARRAY['turn.started', 'tool.called', 'tool.returned',
                                    'model.called', 'model.returned', 'approval.requested',
                                    'approval.answered', 'effect.unknown', 'turn.released',
                                    'turn.deferred', 'message', 'turn.completed',
                                    'turn.failed', 'turn.cancelled', 'turn.interrupted',
                                    'message.delta', 'model.retried', 'history.truncated',
                                    'control.requested', 'wait.started', 'wait.finished',
                                    'signal.received', 'child.started', 'child.finished']))
            THEN 'events_kind_check'
        WHEN NOT (seq > 0) THEN 'events_seq_check'
    END;
BEGIN
    IF failed IS NOT NULL THEN
        PERFORM stint_check_violated('events', failed);
    END IF;
    RETURN true;
END
$$;

CREATE FUNCTION stint_conversation_messages_valid(turn_seq bigint, idx integer, role text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    failed text := CASE
        WHEN NOT (turn_seq > 0) THEN 'conversation_messages_turn_seq_check'
        WHEN NOT (idx >= 0) THEN 'conversation_messages_idx_check'
        WHEN NOT (role = ANY (ARRAY['system', 'user', 'assistant', 'tool']))
            THEN 'conversation_messages_role_check'
    END;
BEGIN
    IF failed IS NOT NULL THEN
        PERFORM stint_check_violated('conversation_messages', failed);
    END IF;
    RETURN true;
END
$$;

CREATE FUNCTION stint_quota_scopes_valid(
    scope text, rpm integer, tpm bigint, concurrency integer, window_seconds real,
    requests_reserved bigint, requests_reconciled bigint, requests_unknown bigint,
    requests_in_flight bigint, tokens_reserved bigint, tokens_reconciled bigint,
    tokens_refunded bigint, tokens_debt bigint, tokens_unknown bigint, tokens_in_flight bigint
) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    failed text := CASE
        WHEN NOT (scope ~ '^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$') THEN 'quota_scopes_scope_check'
        WHEN NOT (rpm > 0) THEN 'quota_scopes_rpm_check'
        WHEN NOT (tpm > 0) THEN 'quota_scopes_tpm_check'
        WHEN NOT (concurrency > 0) THEN 'quota_scopes_concurrency_check'
        WHEN NOT (window_seconds >= 0.1 AND window_seconds <= 86400)
            THEN 'quota_scopes_window_seconds_check'
        WHEN NOT (requests_in_flight >= 0) THEN 'quota_scopes_requests_in_flight_check'
        WHEN NOT (tokens_in_flight >= 0) THEN 'quota_scopes_tokens_in_flight_check'
        WHEN NOT (requests_reserved = requests_reconciled + requests_unknown + requests_in_flight)
            THEN 'quota_scopes_check'
        WHEN NOT (tokens_reserved = tokens_reconciled + tokens_refunded - tokens_debt
                                   + tokens_unknown + tokens_in_flight)
            THEN 'quota_scopes_check1'
    END;
BEGIN
    IF failed IS NOT NULL THEN
        PERFORM stint_check_violated('quota_scopes', failed);
    END IF;
    RETURN true;
END
$$;

CREATE FUNCTION stint_quota_reservations_valid(
    key text, estimated_tokens bigint, actual_tokens bigint, state text, settled_at timestamptz
) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    failed text := CASE
        WHEN NOT (length(key) >= 1 AND length(key) <= 500) THEN 'quota_reservations_key_check'
        WHEN NOT (estimated_tokens >= 0) THEN 'quota_reservations_estimated_tokens_check'
        WHEN NOT (actual_tokens >= 0) THEN 'quota_reservations_actual_tokens_check'
        WHEN NOT (state = ANY (ARRAY['reserved', 'reconciled', 'unknown']))
            THEN 'quota_reservations_state_check'
        WHEN NOT ((state = 'reserved') = (settled_at IS NULL)) THEN 'quota_reservations_check'
        WHEN NOT ((state = 'reconciled') = (actual_tokens IS NOT NULL))
            THEN 'quota_reservations_check1'
    END;
BEGIN
    IF failed IS NOT NULL THEN
        PERFORM stint_check_violated('quota_reservations', failed);
    END IF;
    RETURN true;
END
$$;

ALTER TABLE sessions
    DROP CONSTRAINT sessions_status_check,
    DROP CONSTRAINT sessions_check,
    DROP CONSTRAINT sessions_check1,
    DROP CONSTRAINT sessions_check2,
    DROP CONSTRAINT sessions_check3,
    DROP CONSTRAINT sessions_control_check,
    DROP CONSTRAINT sessions_control_complete,
    DROP CONSTRAINT sessions_depth_check,
    DROP CONSTRAINT sessions_last_event_seq_check,
    DROP CONSTRAINT sessions_last_turn_seq_check,
    DROP CONSTRAINT sessions_lease_epoch_check,
    DROP CONSTRAINT sessions_parent_depth_check,
    DROP CONSTRAINT sessions_queued_turns_check,
    DROP CONSTRAINT sessions_turns_pruned_check,
    ADD CONSTRAINT sessions_valid CHECK (stint_sessions_valid(
        status, lease_owner, lease_expires_at, ready_at, control, control_turn_id,
        control_requested_at, parent_id, depth, last_event_seq, events_pruned_through,
        last_turn_seq, lease_epoch, queued_turns, turns_pruned));

ALTER TABLE turns
    DROP CONSTRAINT turns_status_check,
    DROP CONSTRAINT turns_check,
    DROP CONSTRAINT turns_attempts_check,
    DROP CONSTRAINT turns_busy_check,
    DROP CONSTRAINT turns_seq_check,
    DROP CONSTRAINT turns_timeout_seconds_check,
    DROP CONSTRAINT turns_traceparent_check,
    ADD CONSTRAINT turns_valid CHECK (stint_turns_valid(
        status, finished_at, attempts, busy, seq, timeout_seconds, traceparent));

ALTER TABLE steps
    DROP CONSTRAINT steps_kind_check,
    DROP CONSTRAINT steps_status_check,
    DROP CONSTRAINT steps_check,
    DROP CONSTRAINT steps_check1,
    ADD CONSTRAINT steps_valid CHECK (stint_steps_valid(kind, status, result, finished_at));

ALTER TABLE events
    DROP CONSTRAINT events_kind_check,
    DROP CONSTRAINT events_seq_check,
    ADD CONSTRAINT events_valid CHECK (stint_events_valid(kind, seq));

ALTER TABLE conversation_messages
    DROP CONSTRAINT conversation_messages_turn_seq_check,
    DROP CONSTRAINT conversation_messages_idx_check,
    DROP CONSTRAINT conversation_messages_role_check,
    ADD CONSTRAINT conversation_messages_valid
        CHECK (stint_conversation_messages_valid(turn_seq, idx, role));

ALTER TABLE quota_scopes
    DROP CONSTRAINT quota_scopes_scope_check,
    DROP CONSTRAINT quota_scopes_rpm_check,
    DROP CONSTRAINT quota_scopes_tpm_check,
    DROP CONSTRAINT quota_scopes_concurrency_check,
    DROP CONSTRAINT quota_scopes_window_seconds_check,
    DROP CONSTRAINT quota_scopes_requests_in_flight_check,
    DROP CONSTRAINT quota_scopes_tokens_in_flight_check,
    DROP CONSTRAINT quota_scopes_check,
    DROP CONSTRAINT quota_scopes_check1,
    ADD CONSTRAINT quota_scopes_valid CHECK (stint_quota_scopes_valid(
        scope, rpm, tpm, concurrency, window_seconds, requests_reserved, requests_reconciled,
        requests_unknown, requests_in_flight, tokens_reserved, tokens_reconciled,
        tokens_refunded, tokens_debt, tokens_unknown, tokens_in_flight));

ALTER TABLE quota_reservations
    DROP CONSTRAINT quota_reservations_key_check,
    DROP CONSTRAINT quota_reservations_estimated_tokens_check,
    DROP CONSTRAINT quota_reservations_actual_tokens_check,
    DROP CONSTRAINT quota_reservations_state_check,
    DROP CONSTRAINT quota_reservations_check,
    DROP CONSTRAINT quota_reservations_check1,
    ADD CONSTRAINT quota_reservations_valid CHECK (stint_quota_reservations_valid(
        key, estimated_tokens, actual_tokens, state, settled_at));
