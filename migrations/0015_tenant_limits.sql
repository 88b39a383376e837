-- Stint schema 0015: a limit on the sessions a tenant holds (issue 22, item 8).
--
-- Sessions could be created without limit (2,000 in 6 s with one key) and were
-- never removed. admission_limits.max_sessions bounds the sessions one tenant
-- holds, whatever their status; like the other limits, a tenant's NULL follows
-- the '*' row and the '*' row's NULL is unlimited. Creating a session (POST
-- /v1/sessions, an enqueue without a session, a schedule's tick on a new
-- session) counts the tenant's sessions under a per-tenant advisory lock, so
-- concurrent creators never overshoot. Retention removes idle sessions with no
-- turns left (STINT_RETAIN_IDLE_SESSIONS_DAYS), which frees their places.
ALTER TABLE admission_limits ADD COLUMN max_sessions integer CHECK (max_sessions > 0);

-- What retention walks: idle sessions, oldest first. Only idle rows are in it
-- and its columns never change (status is already in the predicates of other
-- partial indexes), so updates that could be HOT before still are.
CREATE INDEX sessions_idle_idx ON sessions (created_at, id) WHERE status = 'idle';
