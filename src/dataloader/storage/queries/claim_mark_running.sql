-- A claim's marking of the jobs it locked as running (claim_take.sql, claim_limited_jobs.sql,
-- claim_jobs_fair.sql include it as the body of their `claimed` CTE): attempt + 1, the lease, the
-- columns the worker reads back. Needs a `locked` CTE of the job ids whose lock_key was taken.
    UPDATE dl_jobs j
    SET status = 'running',
        started_at = COALESCE(j.started_at, now()),
        -- capped so a hand-written attempt of 2^31-1 cannot overflow and fail every claim
        attempt = LEAST(j.attempt, 2147483646) + 1,
        lease_expires_at = now() + make_interval(secs => j.lease_ttl_sec),
        heartbeat_at = now(),
        -- each attempt journals its first heartbeat (heartbeat_jobs.sql, 0015)
        heartbeat_journaled_at = NULL,
        -- a restartable job stops absorbing re-triggers once it runs: the next trigger queues a
        -- new job behind it on the same lock_key (0011)
        restart_key = NULL
    WHERE j.job_id = ANY (ARRAY(SELECT l.job_id FROM locked l))
    RETURNING j.job_id, j.args, j.partition_key, j.lease_ttl_sec, j.attempt, j.max_attempts,
              j.attempts_before_retry, j.timeout_sec, j.chain_next, j.request_id,
              j.traceparent, j.attempt_span
