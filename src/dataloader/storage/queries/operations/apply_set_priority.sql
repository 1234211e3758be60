-- Bulk priority change of the jobs $1 (uuid[]) for operation $2 to $3: queued jobs only (the
-- claim is the only reader of priority), and only when it differs. Journal 'priority_changed'.
WITH before AS (
    SELECT job_id, priority FROM dl_jobs
    WHERE job_id = ANY ($1::uuid[]) AND status = 'queued' AND priority <> $3::int
    FOR UPDATE
), changed AS (
    UPDATE dl_jobs j
    SET priority = $3::int
    FROM before b
    WHERE j.job_id = b.job_id AND j.status = 'queued'
    RETURNING j.job_id, j.queue, b.priority AS previous
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'priority_changed',
           jsonb_build_object('reason', 'bulk_set_priority', 'operation_id', $2::uuid, 'from', previous,
                              'to', $3::int)
    FROM changed
)
SELECT count(*)::bigint AS changed FROM changed;
