-- The columns of a claim's answer row that every claim shares (claim_answer.sql, claim_limited_jobs.sql,
-- claim_jobs_fair.sql): the candidate `r`, its claimed row `c` (NULL when skipped) and its key's
-- backlog `k` (claim_answer_backlog.sql). Each claim adds its own columns after them.
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
