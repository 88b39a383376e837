-- Stint schema 0004: the agents harness — conversation memory and its event kinds.

-- A session's conversation, in the order the model saw it: one row per chat
-- message (user input, assistant message with its tool calls, tool result).
-- Written once per finished turn, under the lease fence; ``idx`` orders the
-- messages of one turn, ``turn_seq`` orders turns, so (session, turn_seq, idx)
-- is both the identity (a replayed write is a no-op) and the read order.
CREATE TABLE conversation_messages (
    session_id  uuid        NOT NULL REFERENCES sessions (id),
    turn_seq    bigint      NOT NULL CHECK (turn_seq > 0),
    idx         integer     NOT NULL CHECK (idx >= 0),
    turn_id     uuid        NOT NULL REFERENCES turns (id),
    role        text        NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    message     jsonb       NOT NULL,
    lease_epoch bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (session_id, turn_seq, idx)
);

-- Harness event kinds: coalesced token deltas, provider retries, and the cut
-- made when a long conversation is loaded under the history limit.
ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('turn.started', 'tool.called', 'tool.returned',
                    'model.called', 'model.returned',
                    'approval.requested', 'approval.answered',
                    'effect.unknown', 'turn.released', 'message',
                    'turn.completed', 'turn.failed',
                    'turn.cancelled', 'turn.interrupted',
                    'message.delta', 'model.retried', 'history.truncated'));
