-- The earliest next tick of any running schedule (NULL: none); the scheduler sleeps until then.
-- Served by ix_dl_schedules_due. No parameters.
SELECT min(next_run_at) AS next_due_at FROM dl_schedules WHERE NOT paused;
