-- Placeholder so that migration 0014 (schedules and webhooks) applies on its own branch:
-- migrations must be numbered 1..N without gaps. 0013 belongs to another branch; drop this
-- file when that branch's 0013 is merged (see the schedules-webhooks branch's report).
SELECT 1;
