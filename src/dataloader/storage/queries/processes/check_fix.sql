-- A consistency check's repair of one process, in the transaction that holds its lock_key and row
-- (compare-and-set on $3, the version the repair decided from): $4 new status (NULL: keep), $5
-- detail and $6 corrupted_by (written with a new status), $7 whether to set the timer to $8..$10
-- (task id, type, due time), $11 a corrected last_event_id (NULL: keep), and the feed's 'check'
-- row with $12 (JSON text: what was repaired). $1 ns, $2 id.
WITH proc AS (
    UPDATE dl_processes p
    SET status = COALESCE($4::text, p.status),
        previous_status = CASE WHEN $4::text IS NOT NULL AND $4::text <> p.status THEN p.status
                               ELSE p.previous_status END,
        status_changed_at = CASE WHEN $4::text IS NOT NULL AND $4::text <> p.status THEN now()
                                 ELSE p.status_changed_at END,
        detail = CASE WHEN $4::text IS NOT NULL THEN $5::text ELSE p.detail END,
        corrupted_by = CASE WHEN $4::text IS NOT NULL THEN $6::uuid ELSE p.corrupted_by END,
        timer_task_id = CASE WHEN $7::boolean THEN $8::uuid ELSE p.timer_task_id END,
        timer_type = CASE WHEN $7::boolean THEN $9::text ELSE p.timer_type END,
        timer_at = CASE WHEN $7::boolean THEN $10::timestamptz ELSE p.timer_at END,
        last_event_id = COALESCE($11::bigint, p.last_event_id),
        version = p.version + 1,
        updated_at = now()
    WHERE p.ns = $1 AND p.id = $2 AND p.version = $3
    RETURNING p.ns, p.id
), feed AS (
    INSERT INTO dl_process_feed (ns, process_id, kind, payload)
    SELECT ns, id, 'check', $12::text::jsonb FROM proc
), notified AS (
    SELECT pg_notify('dl_process_feed', $1) FROM proc
)
SELECT (SELECT count(*) FROM proc) AS fixed, (SELECT count(*) FROM notified) AS notified
