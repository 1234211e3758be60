-- Change one job's priority ($1 job_id) to $2, for an operator. Only a queued job (the claim is the
-- only reader of priority, as for the bulk set_priority's apply_set_priority.sql), and only when it
-- differs: the same priority again writes nothing, not even a journal row. The change and its
-- journal row 'priority_changed' commit together (promise 4). $3 request id (journal).
-- previous_status is NULL when there is no such job; changed is false when nothing was written.
WITH target AS (
    SELECT job_id, status, priority FROM dl_jobs WHERE job_id = $1 FOR UPDATE
), changed AS (
    UPDATE dl_jobs j
    SET priority = $2::int
    FROM target t
    WHERE j.job_id = $1 AND j.job_id = t.job_id AND t.status = 'queued' AND t.priority <> $2::int
    RETURNING j.job_id, j.queue, t.priority AS previous
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'priority_changed',
           jsonb_strip_nulls(jsonb_build_object('reason', 'manual_set_priority', 'from', previous, 'to', $2::int,
                                                'request_id', $3::text))
    FROM changed
)
SELECT t.status::text AS previous_status, t.priority AS previous_priority,
       (SELECT count(*) FROM changed) > 0 AS changed
FROM target t;
