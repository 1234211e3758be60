-- simple_repair: an `error` process back to `running` without calling its processor (detail and
-- corrupted_by cleared), its timer re-armed as $4..$6 (task id, type, due time; NULLs: none), and
-- the feed's 'repair' row, in one statement. Compare-and-set on $3 (the version read under the
-- row lock) so it applies only to the state the caller checked. $1 ns, $2 id.
WITH proc AS (
    UPDATE dl_processes
    SET status = 'running', previous_status = status, status_changed_at = now(), detail = NULL,
        corrupted_by = NULL, timer_task_id = $4, timer_type = $5, timer_at = $6,
        version = version + 1, updated_at = now()
    WHERE ns = $1 AND id = $2 AND version = $3 AND status = 'error'
    RETURNING ns, id
), feed AS (
    INSERT INTO dl_process_feed (ns, process_id, kind, payload)
    SELECT ns, id, 'repair', jsonb_build_object('status', 'running', 'simple', true) FROM proc
), notified AS (
    SELECT pg_notify('dl_process_feed', $1) FROM proc
)
SELECT (SELECT count(*) FROM proc) AS repaired, (SELECT count(*) FROM notified) AS notified
