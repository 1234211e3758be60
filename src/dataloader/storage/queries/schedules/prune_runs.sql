-- Forget history older than $1 days (the jobs themselves are retention's business), at most $2 rows
-- per statement so a long backlog is cut in short transactions. Returns how many rows were deleted.
WITH old AS (
    SELECT schedule_name, tick_at FROM dl_schedule_runs
    WHERE enqueued_at < now() - make_interval(days => $1)
    LIMIT $2
), deleted AS (
    DELETE FROM dl_schedule_runs r USING old
    WHERE r.schedule_name = old.schedule_name AND r.tick_at = old.tick_at
    RETURNING 1
)
SELECT count(*) AS deleted FROM deleted;
