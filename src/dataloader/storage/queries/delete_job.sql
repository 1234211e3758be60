-- Delete one finished job ($1 job_id) for an operator, as the bulk delete's apply_delete.sql does a
-- batch: only a finished row (succeeded, failed, canceled, lost), so no worker ever finds its running
-- job gone and no queued job loses its place; its journal rows go with it (ON DELETE CASCADE). The
-- caller logs what was deleted (the audit line). previous_status is NULL when there is no such job;
-- deleted is false when its status forbids it.
WITH target AS (
    SELECT job_id, status, queue, task FROM dl_jobs WHERE job_id = $1 FOR UPDATE
), gone AS (
    DELETE FROM dl_jobs j
    USING target t
    WHERE j.job_id = $1 AND j.job_id = t.job_id AND t.status IN ('succeeded', 'failed', 'canceled', 'lost')
    RETURNING j.job_id
)
SELECT t.status::text AS previous_status, t.queue, t.task, (SELECT count(*) FROM gone) > 0 AS deleted
FROM target t;
