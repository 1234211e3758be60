-- Pause ($2 true) or resume ($2 false) a schedule. A resume moves next_run_at to $3 (the first tick
-- after now, computed by the caller): the ticks of the pause were skipped on purpose, they are not
-- "missed". A pause keeps next_run_at as it is. `revision` changes, so a scheduler that read the
-- row before cannot fire it (its compare-and-set fails). Wakes the schedulers.
-- $1 name, $2 paused, $3 next_run_at for a resume (ignored for a pause).
WITH changed AS (
    UPDATE dl_schedules
    SET paused = $2,
        next_run_at = CASE WHEN NOT $2 AND paused THEN $3 ELSE next_run_at END,
        revision = revision + 1,
        updated_at = now()
    WHERE name = $1
    RETURNING *
), signal AS (
    SELECT pg_notify('dl_schedules', '') FROM changed
)
SELECT c.*, (SELECT count(*) FROM signal) AS signaled FROM changed c;
