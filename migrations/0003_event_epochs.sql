-- Stint schema 0003: the lease epoch each event was written under.
-- Lets a checker prove that no stale owner (zombie) wrote after a newer one:
-- within a session, worker-written events never go back to an older epoch.
-- NULL for events written by a client (cancel, answer) under the row lock.
ALTER TABLE events ADD COLUMN lease_epoch bigint;
