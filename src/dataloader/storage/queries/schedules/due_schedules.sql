-- Schedules whose next tick is due at $1 (the scheduler's clock), oldest due first, at most $2.
-- Read without locks: the fire is a compare-and-set on `revision` (advance_schedule.sql), so a row
-- another replica fires meanwhile is simply not fired twice. Served by ix_dl_schedules_due.
SELECT * FROM dl_schedules
WHERE NOT paused AND next_run_at <= $1
ORDER BY next_run_at
LIMIT $2;
