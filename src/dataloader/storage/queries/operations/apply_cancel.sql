-- Bulk cancel of the jobs $1 (uuid[]) for operation $2: the single-job cancel's compare-and-set
-- (cancel_job.sql): a queued job is canceled at once; a running one gets cancel_requested and a
-- 'dl_cancel' notification so its worker stops at its next chunk; others are left alone.
WITH changed AS (
    UPDATE dl_jobs j
    SET cancel_requested = true,
        status = CASE WHEN j.status = 'queued' THEN 'canceled' ELSE j.status END::dl_status,
        finished_at = CASE WHEN j.status = 'queued' THEN now() ELSE j.finished_at END,
        error = CASE WHEN j.status = 'queued' THEN 'canceled before start' ELSE j.error END
    WHERE j.job_id = ANY ($1::uuid[]) AND j.status IN ('queued', 'running') AND NOT j.cancel_requested
    RETURNING j.job_id, j.queue, j.status
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, CASE WHEN status = 'canceled' THEN 'canceled' ELSE 'cancel_requested' END,
           jsonb_build_object('reason', 'bulk_cancel', 'operation_id', $2::uuid)
    FROM changed
), signal AS (
    SELECT pg_notify('dl_cancel', job_id::text) FROM changed WHERE status = 'running'
)
SELECT (SELECT count(*) FROM changed)::bigint AS changed, (SELECT count(*) FROM signal) AS signaled;
