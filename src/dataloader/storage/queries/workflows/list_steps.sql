-- A run's recorded history, oldest first, with each step job's queue and lock_key (NULL when the
-- step ran inside the run's job, or its job was deleted since). $1 run id.
SELECT s.seq, s.kind, s.name, s.state, s.result::text AS result, s.error, s.attempts, s.wake_at, s.remaining,
       s.created_at, s.finished_at, s.job_id, j.queue AS job_queue, j.lock_key AS job_lock_key,
       j.status::text AS job_status
FROM dl_workflow_steps s
-- the step jobs' ids as an index condition too, as children.sql does: a join alone may walk
-- dl_jobs' whole primary key under a generic plan made on an empty table
LEFT JOIN dl_jobs j ON j.job_id = s.job_id
    AND j.job_id = ANY (ARRAY(SELECT t.job_id FROM dl_workflow_steps t WHERE t.run_id = $1 AND t.job_id IS NOT NULL))
WHERE s.run_id = $1
ORDER BY s.seq
