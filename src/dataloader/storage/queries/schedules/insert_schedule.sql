-- Create a schedule (through the API or the CLI: source 'api'). An existing name inserts nothing
-- (the caller reports the conflict). Wakes the schedulers ('dl_schedules') so the new schedule's
-- first tick is not waited for behind an older, later one.
-- $1 name, $2 task, $3 queue, $4 args (JSON text), $5 cron, $6 every_ms, $7 timezone, $8 missed,
-- $9 catch_up_limit, $10 grace_sec, $11 lock_key, $12 priority, $13 max_attempts, $14 lease_ttl_sec,
-- $15 paused, $16 next_run_at (the first tick after now, computed by the caller).
WITH inserted AS (
    INSERT INTO dl_schedules (name, task, queue, args, cron, every_ms, timezone, missed, catch_up_limit,
                              grace_sec, lock_key, priority, max_attempts, lease_ttl_sec, paused, source,
                              next_run_at)
    VALUES ($1, $2, $3, $4::text::jsonb, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 'api', $16)
    ON CONFLICT (name) DO NOTHING
    RETURNING *
), signal AS (
    SELECT pg_notify('dl_schedules', '') FROM inserted
)
SELECT i.*, (SELECT count(*) FROM signal) AS signaled FROM inserted i;
