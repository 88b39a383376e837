-- Stint schema 0007: reserved. This number belongs to the provider-quotas
-- migration written in parallel on another branch; this empty placeholder only
-- keeps the versions 1..N without a gap on the observability branch, so that
-- 0008_observability applies. Delete this file when the two branches merge (the
-- migration runner refuses two files with one version, so it cannot be missed).
SELECT 1;
