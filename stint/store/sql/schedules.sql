-- name: schedule_columns
-- Fragment: a schedule as every door shows it, from schedules sc.
sc.id, sc.tenant, sc.name, sc.cron, sc.interval_seconds, sc.timezone, sc.anchor_at,
sc.session_id, sc.pin, sc.input, sc.timeout_seconds, sc.busy, sc.catch_up, sc.paused_at,
sc.next_run_at, sc.last_tick_at, sc.ticks_enqueued, sc.ticks_skipped, sc.ticks_refused,
sc.created_at, sc.updated_at

-- name: schedules_clock
-- The database clock: every schedule time is computed from it, never the caller's.
SELECT now() AS now

-- name: schedules_insert
-- A new schedule; a name the tenant already uses inserts nothing and returns no row.
INSERT INTO schedules AS sc (tenant, name, cron, interval_seconds, timezone, anchor_at,
                             session_id, pin, input, timeout_seconds, busy, catch_up,
                             next_run_at)
VALUES (%(tenant)s, %(name)s, %(cron)s, %(interval_seconds)s, %(timezone)s, %(anchor_at)s,
        %(session_id)s, %(pin)s, %(input)s, %(timeout_seconds)s, %(busy)s, %(catch_up)s,
        %(next_run_at)s)
ON CONFLICT ((coalesce(tenant, '')), name) DO NOTHING
RETURNING /*include:schedule_columns*/

-- name: schedules_list
-- Every schedule, or one tenant's when %(tenant)s is set, by name.
SELECT /*include:schedule_columns*/
FROM schedules sc
WHERE %(tenant)s::text IS NULL OR sc.tenant = %(tenant)s
ORDER BY sc.tenant NULLS FIRST, sc.name
LIMIT %(limit)s

-- name: schedules_get
-- One schedule; with %(tenant)s set, only that tenant's.
SELECT /*include:schedule_columns*/
FROM schedules sc
WHERE sc.id = %(schedule_id)s AND (%(tenant)s::text IS NULL OR sc.tenant = %(tenant)s)

-- name: schedules_lock
-- Lock one schedule (a tick in progress holds it: this waits for the tick) and read it
-- with the database clock; resume decides its next run in the next statement.
SELECT /*include:schedule_columns*/, now() AS now
FROM schedules sc
WHERE sc.id = %(schedule_id)s AND (%(tenant)s::text IS NULL OR sc.tenant = %(tenant)s)
FOR UPDATE

-- name: schedules_pause
-- Pause (again: a no-op that keeps the first pause time). One UPDATE of one row.
UPDATE schedules AS sc
SET paused_at = coalesce(paused_at, now()), updated_at = now()
WHERE sc.id = %(schedule_id)s AND (%(tenant)s::text IS NULL OR sc.tenant = %(tenant)s)
RETURNING /*include:schedule_columns*/

-- name: schedules_resume
-- Runs after schedules_lock in the same transaction: the next run was computed from the
-- locked row and the clock read with it. Ticks that fell while paused never run.
UPDATE schedules AS sc
SET paused_at = NULL, next_run_at = %(next_run_at)s, updated_at = now()
WHERE sc.id = %(schedule_id)s
RETURNING /*include:schedule_columns*/

-- name: schedules_delete
-- Delete a schedule and its ticks (ON DELETE CASCADE); it waits for a tick in progress.
DELETE FROM schedules AS sc
WHERE sc.id = %(schedule_id)s AND (%(tenant)s::text IS NULL OR sc.tenant = %(tenant)s)
RETURNING /*include:schedule_columns*/

-- name: schedules_take_due
-- The scheduler's election: up to %(limit)s due, unpaused schedules, earliest first,
-- locked until this transaction ends; schedules another worker holds are skipped, and
-- nobody else runs them meanwhile. A row changed since the snapshot is re-read at its
-- newest version and its conditions re-checked before it is returned (a schedule paused,
-- resumed or moved past now by another worker is not taken), and every decision of the
-- tick is made from the locked row alone. now: the database clock, for the timetable.
SELECT /*include:schedule_columns*/, now() AS now
FROM schedules sc
WHERE sc.paused_at IS NULL AND sc.next_run_at <= now()
ORDER BY sc.next_run_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: schedule_ticks_insert
-- Claim one tick under the schedule's lock: the primary key (schedule, tick time) makes a
-- second row for it impossible; a conflict returns no row and the tick is not run again.
INSERT INTO schedule_ticks (schedule_id, tick_at, worker)
VALUES (%(schedule_id)s, %(tick_at)s, %(worker)s)
ON CONFLICT (schedule_id, tick_at) DO NOTHING
RETURNING tick_at

-- name: schedule_ticks_record
-- What the claimed tick did (same transaction as its claim and its turn).
UPDATE schedule_ticks
SET outcome = %(outcome)s, session_id = %(session_id)s, turn_id = %(turn_id)s,
    detail = %(detail)s
WHERE schedule_id = %(schedule_id)s AND tick_at = %(tick_at)s

-- name: schedules_advance
-- Move the locked schedule to its next tick and count what this pass did.
UPDATE schedules
SET next_run_at    = %(next_run_at)s,
    last_tick_at   = coalesce(%(last_tick_at)s, last_tick_at),
    ticks_enqueued = ticks_enqueued + %(enqueued)s,
    ticks_skipped  = ticks_skipped + %(skipped)s,
    ticks_refused  = ticks_refused + %(refused)s,
    updated_at     = now()
WHERE id = %(schedule_id)s

-- name: schedules_next_due
-- Seconds until the earliest unpaused schedule is due (negative: overdue; null: none).
SELECT extract(epoch FROM min(next_run_at) - now())::float8 AS seconds
FROM schedules
WHERE paused_at IS NULL

-- name: schedule_ticks_recent
-- A schedule's latest ticks, newest first.
SELECT tick_at, outcome, session_id, turn_id, detail, worker, created_at
FROM schedule_ticks
WHERE schedule_id = %(schedule_id)s
ORDER BY tick_at DESC
LIMIT %(limit)s

-- name: prune_schedule_ticks
-- Retention: up to %(batch)s ticks recorded before the horizon go (the schedule's counters
-- keep them counted; a pruned tick is never due again, next_run_at is past it).
-- Safe under READ COMMITTED: the DELETE re-checks each row's age on its newest version;
-- one worker prunes an interval (maintenance_take).
WITH gone AS (
    DELETE FROM schedule_ticks t
    WHERE (t.schedule_id, t.tick_at) IN (
              SELECT x.schedule_id, x.tick_at FROM schedule_ticks x
              WHERE x.created_at < now() - make_interval(secs => %(horizon_seconds)s)
              ORDER BY x.created_at
              LIMIT %(batch)s)
      AND t.created_at < now() - make_interval(secs => %(horizon_seconds)s)
    RETURNING 1
)
SELECT count(*) AS count FROM gone
