-- Stint schema 0011: every foreign key that points at a turn is checked
-- through an index, or is gone.
--
-- Retention deletes turns. For each deleted turn, PostgreSQL checks that no
-- row still points at it, with a lookup by the referencing columns. Under
-- 0001 and 0004 those columns were turn_id alone, and no index of events,
-- steps or conversation_messages starts with turn_id, so each deleted turn
-- meant a scan of those whole tables: O(batch x history) per batch. In the
-- 100,000-turn scale soak, prune_turns passed its statement timeout after
-- about 10,000 turns and never deleted a turn again, so the turns table grew
-- without bound while the events were pruned.
--
-- steps: the key becomes (session_id, turn_id), the leading columns of
-- steps' primary key (session_id, turn_id, step_key).
-- conversation_messages: the key becomes (session_id, turn_seq) against
-- turns' unique (session_id, seq), the leading columns of its primary key
-- (session_id, turn_seq, idx). Its turn_id is written from the same turn row.
-- events: no key to turns. Its primary key is (session_id, seq), and a
-- covering index would add an entry to every event (four per turn), the
-- hottest insert there is. Events have one writer, the log_append fragment,
-- which takes the turn id from the row it updates in the same statement, and
-- retention deletes a turn's events before the turn, in the same statement.
-- The consistency checks run after every load test now also look for an
-- event whose turn does not exist (ops/checks, checks_identity_mismatches).
-- events keeps its key to sessions. quota_reservations keeps its key to
-- turns: its turn_id index (0009) serves the check.
ALTER TABLE turns ADD CONSTRAINT turns_session_id_id_key UNIQUE (session_id, id);

ALTER TABLE steps DROP CONSTRAINT steps_turn_id_fkey,
    ADD CONSTRAINT steps_session_turn_fkey
        FOREIGN KEY (session_id, turn_id) REFERENCES turns (session_id, id);
ALTER TABLE conversation_messages DROP CONSTRAINT conversation_messages_turn_id_fkey,
    ADD CONSTRAINT conversation_messages_session_turn_fkey
        FOREIGN KEY (session_id, turn_seq) REFERENCES turns (session_id, seq);
ALTER TABLE events DROP CONSTRAINT events_turn_id_fkey;
