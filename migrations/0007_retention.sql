-- Stint schema: retention. History older than its retention is pruned in small
-- batches (`stint prune`, and one elected worker on a schedule), so no table
-- grows for ever and no prune ever holds a lock for long.

-- The seqs at the head of a session's event log that were pruned: its events
-- are exactly events_pruned_through + 1 .. last_event_seq, still contiguous.
-- turns_pruned counts the finished turns removed (their steps, messages and
-- journal lines went with them).
ALTER TABLE sessions
    ADD COLUMN events_pruned_through bigint NOT NULL DEFAULT 0
        CHECK (events_pruned_through >= 0 AND events_pruned_through <= last_event_seq),
    ADD COLUMN turns_pruned bigint NOT NULL DEFAULT 0 CHECK (turns_pruned >= 0);

-- Finished turns, oldest first (ties by id): what the pruner walks.
CREATE INDEX turns_finished_idx ON turns (finished_at, id) WHERE finished_at IS NOT NULL;

-- Periodic chores shared by every worker: one run per interval, by whichever
-- worker moves last_run_at first (no lock is held while the chore runs).
-- ``pruned_until``, ``pruned_after``: the finish time and id of the last turn
-- whose events were pruned (the events pass starts after it next time instead
-- of walking its past again).
CREATE TABLE maintenance (
    task         text        PRIMARY KEY,
    last_run_at  timestamptz NOT NULL DEFAULT 'epoch',
    last_run_by  text,
    pruned_until timestamptz NOT NULL DEFAULT 'epoch',
    pruned_after uuid        NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000'
);
INSERT INTO maintenance (task) VALUES ('prune');
