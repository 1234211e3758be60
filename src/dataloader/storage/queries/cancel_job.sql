-- Ask a job to stop. A queued job is canceled at once; a running one gets cancel_requested and a
-- 'dl_cancel' notification so its worker stops at the next chunk. Finished jobs are not touched.
-- $1 job_id, $2 request id (journal).
WITH target AS (
    SELECT job_id, status FROM dl_jobs WHERE job_id = $1 FOR UPDATE
), changed AS (
    UPDATE dl_jobs j
    SET cancel_requested = true,
        status = CASE WHEN t.status = 'queued' THEN 'canceled' ELSE j.status END::dl_status,
        finished_at = CASE WHEN t.status = 'queued' THEN now() ELSE j.finished_at END,
        error = CASE WHEN t.status = 'queued' THEN 'canceled before start' ELSE j.error END,
        -- a canceled restartable job no longer absorbs re-triggers (0011)
        restart_key = NULL
    FROM target t
    WHERE j.job_id = $1 AND j.job_id = t.job_id AND t.status IN ('queued', 'running') AND NOT j.cancel_requested
    RETURNING j.job_id, j.queue, j.status, j.lock_key
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, CASE WHEN status = 'canceled' THEN 'canceled' ELSE 'cancel_requested' END,
           jsonb_strip_nulls(jsonb_build_object('request_id', $2::text))
    FROM changed
), signal AS (
    SELECT pg_notify('dl_cancel', job_id::text) FROM changed WHERE status = 'running'
), unparked AS (
    -- a canceled queued job may have been its key's head, with the key's other jobs parked behind
    -- it (0017): the next one must not wait for the reaper's sweep
    SELECT CASE WHEN EXISTS (SELECT 1 FROM changed c CROSS JOIN LATERAL (
                                 SELECT 1 FROM dl_jobs p
                                 WHERE p.lock_key = c.lock_key AND p.status = 'queued' AND p.key_parked LIMIT 1) p
                             WHERE c.status = 'canceled')
                THEN dl_unpark_key_heads(ARRAY(SELECT lock_key FROM changed WHERE status = 'canceled'))
                ELSE 0 END AS woken
)
SELECT t.status::text AS previous_status,
       (SELECT woken FROM unparked) AS keys_unparked,
       (SELECT count(*) FROM changed) AS changed,
       (SELECT count(*) FROM signal) AS signaled
FROM target t;
