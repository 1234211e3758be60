-- End one attempt: succeeded, canceled, failed, or back to queued for a retry / a release.
-- Fenced: nothing changes unless the job is still running with attempt $2.
-- $1 job_id, $2 attempt, $3 outcome ('succeeded'|'canceled'|'error'|'release'),
-- $4 error text, $5 fatal (no retry), $6 max_attempts override (NULL = the row's),
-- $7 delay seconds before the job may run again (retry/release),
-- $8 release reason (journal), $9 lock_key, $10 unlock the advisory lock of $9 on this connection.
WITH target AS (
    SELECT j.job_id, j.lock_key,
           CASE
               WHEN $3 = 'succeeded' THEN 'succeeded'
               WHEN $3 = 'canceled' THEN 'canceled'
               -- a cancel asked for while it ran wins over a retry or a hand-back
               WHEN j.cancel_requested THEN 'canceled'
               WHEN $3 = 'release' THEN 'queued'
               WHEN NOT $5 AND j.attempt < COALESCE($6::int, j.max_attempts) THEN 'queued'
               ELSE 'failed'
           END::dl_status AS new_status,
           $7::float8 AS delay_sec
    FROM dl_jobs j
    WHERE j.job_id = $1 AND j.status = 'running' AND j.attempt = $2
    FOR UPDATE OF j
), ended AS (
    UPDATE dl_jobs j
    SET status = t.new_status,
        attempt = CASE WHEN $3 = 'release' THEN j.attempt - 1 ELSE j.attempt END,
        started_at = CASE WHEN $3 = 'release' AND j.attempt = 1 THEN NULL ELSE j.started_at END,
        available_at = CASE WHEN t.new_status = 'queued'
                            THEN now() + make_interval(secs => t.delay_sec)
                            ELSE j.available_at END,
        error = CASE WHEN $3 = 'succeeded' THEN NULL
                     WHEN $3 IN ('error', 'canceled') THEN $4
                     WHEN t.new_status = 'canceled' THEN 'canceled by request'
                     ELSE j.error END,
        lease_expires_at = NULL,
        finished_at = CASE WHEN t.new_status = 'queued' THEN NULL ELSE now() END
    FROM target t
    WHERE j.job_id = t.job_id
    RETURNING j.job_id, j.queue, j.status, j.available_at, j.lock_key
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT e.job_id, e.queue,
           CASE
               WHEN e.status = 'succeeded' THEN 'done'
               WHEN e.status = 'canceled' THEN 'canceled'
               WHEN e.status = 'failed' THEN 'failed'
               ELSE 'requeue'
           END,
           jsonb_strip_nulls(jsonb_build_object(
               'attempt', $2::int,
               'error', $4::text,
               'fatal', CASE WHEN $5 THEN true END,
               'reason', CASE WHEN $3 = 'release' THEN $8::text
                              WHEN $3 = 'error' AND e.status = 'queued' THEN 'retry' END,
               'available_at', CASE WHEN e.status = 'queued' THEN e.available_at END))
    FROM ended e
), waiters AS (
    -- Jobs of other queues may be waiting for this lock_key: wake their workers now.
    SELECT pg_notify('dl_jobs', w.queue)
    FROM (
        SELECT DISTINCT q.queue
        FROM dl_jobs q JOIN ended e ON q.lock_key = e.lock_key
        WHERE q.status = 'queued' AND q.job_id <> e.job_id AND q.available_at <= now()
    ) w
)
SELECT (SELECT status::text FROM ended) AS status,
       (SELECT available_at FROM ended) AS available_at,
       (SELECT count(*) FROM waiters) AS woken,
       CASE WHEN $10 THEN pg_advisory_unlock(hashtext($9)) END AS unlocked;
