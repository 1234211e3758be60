-- Delete a schedule and its history (dl_schedule_runs cascades). Jobs it enqueued stay.
-- $1 name. Returns the name when a row was deleted.
WITH deleted AS (
    DELETE FROM dl_schedules WHERE name = $1 RETURNING name
), signal AS (
    SELECT pg_notify('dl_schedules', '') FROM deleted
)
SELECT d.name, (SELECT count(*) FROM signal) AS signaled FROM deleted d;
