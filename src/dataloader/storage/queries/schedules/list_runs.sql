-- A schedule's history, newest tick first: what each tick enqueued and that job's status now
-- (NULL once the job was deleted). $1 name, $2 only ticks before this (NULL: from the newest),
-- $3 limit.
SELECT r.schedule_name, r.tick_at, r.job_id, r.enqueued_at, r.lag_sec, r.skipped_before,
       j.status::text AS job_status
FROM dl_schedule_runs r
LEFT JOIN dl_jobs j ON j.job_id = r.job_id
WHERE r.schedule_name = $1 AND ($2::timestamptz IS NULL OR r.tick_at < $2)
ORDER BY r.tick_at DESC
LIMIT $3;
