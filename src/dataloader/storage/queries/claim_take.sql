-- The claim's taking part, after its `candidate` CTE (claim_jobs.sql, step_succeeded_claim.sql
-- include it where they say `-- @include claim_take`): of each lock_key's first candidate ask for
-- the key's advisory lock, mark the ones that got it running, and journal their 'picked' rows.
-- claim_jobs.sql's header says why each part has its shape. $1 queue (every candidate is of it),
-- $2 worker. Defines ranked (the candidates, key_rank), locked, claimed, journal.
ranked AS (
    SELECT c.*, row_number() OVER (PARTITION BY c.lock_key
                                   ORDER BY c.priority, c.available_at, c.created_at) AS key_rank
    FROM candidate c
), locked AS MATERIALIZED (
    SELECT r.job_id
    FROM ranked r
    WHERE CASE WHEN r.key_rank = 1 THEN pg_try_advisory_lock(hashtext(r.lock_key)) ELSE false END
), claimed AS (
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
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT c.job_id, $1::text, 'picked', jsonb_build_object('attempt', c.attempt, 'worker', $2::text)
    FROM claimed c JOIN ranked r USING (job_id)
)
