-- Stint schema 0002: session controls (cancel, interrupt), turn timeouts, reasons.

-- A control request for the session's running turn, for the worker holding its
-- lease: NOTIFY carries it at once, the lease keeper finds it if that was missed.
ALTER TABLE sessions
    ADD COLUMN control              text CHECK (control IN ('cancel', 'interrupt')),
    ADD COLUMN control_turn_id      uuid,
    ADD COLUMN control_reason       text,
    ADD COLUMN control_requested_at timestamptz,
    ADD CONSTRAINT sessions_control_complete
        CHECK ((control IS NULL) = (control_turn_id IS NULL)
               AND (control IS NULL) = (control_requested_at IS NULL));

-- Per-turn time limit (NULL: the worker's STINT_TURN_TIMEOUT) and why a turn
-- ended the way it did (timeout, operator, new input).
ALTER TABLE turns
    ADD COLUMN timeout_seconds real CHECK (timeout_seconds > 0),
    ADD COLUMN reason          text;

-- Parked turns of a session (waiting for an answer), found by `stint answer`.
CREATE INDEX turns_parked_idx ON turns (session_id) WHERE status = 'parked';
