-- The claim's answer (after claim_take.sql): every candidate, claimed or skipped, in claim order,
-- with what the worker needs to run a claimed one; see claim_jobs.sql's header.
SELECT r.job_id, r.queue, r.task, c.args, r.lock_key, c.partition_key, c.lease_ttl_sec, c.attempt,
       c.max_attempts,
       -- the attempt budget counts from the last manual retry (0006): the worker's outcome
       -- decision needs it to tell a retry from the last failure
       c.attempts_before_retry,
       -- the job's own run-time limit (0010; NULL: the pipeline's, or none)
       c.timeout_sec,
       -- the stages to enqueue when it succeeds (0011; NULL for a job that is not a chain's)
       c.chain_next,
       -- clamped like queue_stats.sql: no stored time may make the subtraction overflow
       extract(epoch FROM now() - GREATEST(LEAST(GREATEST(r.created_at, r.available_at), now()),
                                           timestamptz '1970-01-01 00:00:00+00'))::float8 AS wait_sec,
       hashtext(r.lock_key) AS lock_hash,
       -- the HTTP request that enqueued the job, so worker log lines carry its request id (a
       -- column written at enqueue, 0018: no look-up of the 'queued' journal row per job)
       c.request_id,
       -- the caller's trace context (0020): the attempt's span is its child
       c.traceparent,
       -- the span of its previous traced attempt (0021): the new attempt's span links to it
       c.attempt_span,
       c.job_id IS NOT NULL AS claimed,
       COALESCE(k.backlog, false) AS key_backlog,
       COALESCE(k.backlog OR k.parked, false) AS key_parked_behind,
       r.key_rank = 1 AS asked_lock,
       -- dl_jobs' size now, for storage/plan_epoch.py: the worker's statements are prepared anew
       -- when the table has outgrown the size their cached plans were made for (one call per claim)
       (SELECT (pg_relation_size('dl_jobs'::regclass) / current_setting('block_size')::int)::int) AS table_pages
FROM ranked r LEFT JOIN claimed c USING (job_id)
-- The key's other queued jobs, for a claimed job only (the condition on c gates the scan): the
-- runnable unparked ones first (index order: key_parked false before true), then the parked ones,
-- at most 16 rows. 16 unparked runnable: a backlog (whether any is parked behind them does not
-- matter then: key_parked_behind is true either way, and the worker parks them). Fewer: the scan
-- reaches the parked rows, if any. A hot key's 100,000 parked jobs cost at most 16 rows; never a
-- hash or a count of them (an EXISTS here was planned as a hash of every parked job: 44 ms).
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE NOT w.key_parked) >= 16 AS backlog, bool_or(w.key_parked) AS parked
    FROM (SELECT w.key_parked FROM dl_jobs w
          WHERE c.job_id IS NOT NULL
            AND w.lock_key = r.lock_key AND w.status = 'queued' AND w.job_id <> r.job_id
            AND (w.key_parked OR w.available_at <= now())
          ORDER BY w.key_parked
          LIMIT 16) w
) k ON true
ORDER BY r.priority, r.available_at, r.created_at
