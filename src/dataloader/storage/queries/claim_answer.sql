-- The claim's answer (after claim_take.sql): every candidate, claimed or skipped, in claim order,
-- with what the worker needs to run a claimed one; see claim_jobs.sql's header.
-- @include claim_answer_job
       r.key_rank = 1 AS asked_lock,
       -- dl_jobs' size now, for storage/plan_epoch.py: the worker's statements are prepared anew
       -- when the table has outgrown the size their cached plans were made for (one call per claim)
       (SELECT (pg_relation_size('dl_jobs'::regclass) / current_setting('block_size')::int)::int) AS table_pages
FROM ranked r LEFT JOIN claimed c USING (job_id)
-- @include claim_answer_backlog
ORDER BY r.priority, r.available_at, r.created_at
