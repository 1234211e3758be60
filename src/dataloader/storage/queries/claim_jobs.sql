-- Claim up to {limit} runnable jobs of queue $1 for worker $2, in one statement: take each job's
-- lock_key advisory lock on this connection (the queue's control connection, which holds the
-- locks of all its running jobs), and mark the jobs that got it running (attempt + 1, lease) with
-- their 'picked' journal rows.
--
-- Order: priority, then the time the job became runnable (available_at), then created_at. For a
-- job enqueued to run now available_at = created_at, so this is the spec's (priority, created_at)
-- order; a delayed job or a retry queues by its due time, as in Oban and River. It is what lets
-- ix_dl_jobs_claim_order serve the claim in O(log n) whatever the backlog (see migration 0004).
--
-- Lock keys, without wasted claims:
-- - jobs whose lock_key already has a running job are not candidates at all;
-- - of several candidates with one lock_key, only the first asks for the lock (key_rank = 1); the
--   others stay queued untouched (the CASE fixes the evaluation order, so a later one never takes
--   a second, re-entrant count of the lock);
-- - a candidate whose lock is taken (another node claims a job of that key at this very instant)
--   is not updated either: no attempt, no journal row, nothing to put back. Losing a race costs
--   nothing but a row lock held until this statement's transaction ends.
-- Every candidate comes back: claimed ones with their job, skipped ones with claimed = false and
-- asked_lock telling a lost lock (the caller checks who holds the key) from a duplicate key.
-- Advisory locks are re-entrant within a session: a key this connection already holds (a
-- fenced-off attempt of ours still winding down, or two keys with one hashtext) is granted again;
-- the caller detects that by lock_hash and gives the job back.
--
-- Parked jobs (0017) wait behind a running key outside ix_dl_jobs_claim_order, so the walk never
-- visits them; the finish that frees their key unparks its head. key_backlog tells the worker
-- that the key it just took has 16 or more unparked runnable waiters: it parks them from its control
-- connection (park_key_waiters.sql), since each would otherwise be walked and rejected by every
-- claim of this queue while the key runs. key_parked_behind tells it that the key's finish hands
-- the key over (parked jobs, or a backlog about to be parked), so it claims in the finish's step.
-- Both come from ONE probe per claimed job (the `key` lateral below: the key's queued rows of
-- ix_dl_jobs_lock_key_active, unparked first, at most 16); on the common path (a key with no
-- other queued job) it finds only the claimed job itself.
--
-- {limit} is replaced by an integer, one prepared statement per batch size: with a parameter
-- ($3) PostgreSQL's reusable generic plan guesses the LIMIT and picks a sequential scan, so it
-- re-planned the claim on every call instead (about half of the claim's time).
WITH candidate AS (
    SELECT q.job_id, q.queue, q.task, q.lock_key, q.priority, q.available_at, q.created_at
    FROM dl_jobs q
    WHERE q.status = 'queued'
      AND q.queue = $1
      AND q.available_at <= now()
      AND NOT q.key_parked
      -- A paused queue (dl_queue_flow, 0019; docs/flow-control.md) starts nothing: uncorrelated,
      -- so one probe of the table's primary key per claim (an InitPlan gating the walk), and an
      -- empty table when nothing was ever paused. Read in this statement's snapshot, so a pause
      -- holds for every claim that starts after it committed, on every node.
      -- Nor does a queue with a limit (0022): this claim cannot enforce one, so it leaves such a
      -- queue to claim_limited_jobs.sql (the worker learns the queue is limited from
      -- next_due_in.sql after this claim came back empty, and claims again with that one). So a
      -- limit set at run time holds from its commit on, as a pause does, and an unlimited queue's
      -- claim keeps this plan: the same probe, a longer filter on the row it found.
      -- Nor a fair queue (0024), left to claim_jobs_fair.sql the same way (its own order across
      -- partition keys, with the flow gate when it also has limits). Nor a queue with a limited
      -- task (0027: task_limited, on the same row, so no other probe).
      AND NOT EXISTS (SELECT 1 FROM dl_queue_flow f
                      WHERE f.queue = $1
                        AND (f.paused OR f.concurrency IS NOT NULL OR f.partition_concurrency IS NOT NULL
                             OR f.rate_limit IS NOT NULL OR f.partition_rate_limit IS NOT NULL OR f.fair_share
                             OR f.task_limited))
      -- A paused task of the queue (dl_task_flow, 0025) starts nothing: the array of its paused
      -- tasks is uncorrelated, so one probe of that table's primary key per claim (an InitPlan; an
      -- empty table when no task was ever paused), and each candidate is compared with the array.
      -- `|| ''` hides task's statistics: in a queue of one task, `task <> <unknown array>` was
      -- estimated to keep no row, which costed the walk as reading the whole index (the plan flip
      -- the lock_key term below describes); the estimate is now the default's.
      AND q.task || '' <> ALL (ARRAY(SELECT t.task FROM dl_task_flow t WHERE t.queue = $1 AND t.paused))
      -- `|| ''` hides lock_key's statistics from this estimate (same value, same plans available):
      -- with a hot key's 100,000 parked rows, the column's most common value is the running key,
      -- so PostgreSQL expected this to reject 99 % of the walk, costed the walk of
      -- ix_dl_jobs_claim_order as reading it all, and in about 1 ANALYZE of 5 preferred to read
      -- every unparked queued job out of ix_dl_jobs_lock_key_active and sort them (2-4 ms instead
      -- of 0.02 ms; bench/hot_key.py's 2.8x and 3.8x runs). Parked rows are never candidates.
      AND NOT EXISTS (
          SELECT 1 FROM dl_jobs r
          -- `status > 'queued'` within ('queued', 'running') is 'running' (the enum's order), said
          -- so that only ix_dl_jobs_lock_key_active (predicate: those two) can serve the probe, not
          -- ix_dl_jobs_running_lease (predicate status = 'running'). While another session holds
          -- the xmin horizon, a VACUUM counts that index's entries as 0 live rows though it still
          -- holds one per job run since (none removable); planned as a full scan of it (estimated
          -- cheaper by a hair), each candidate's probe read all of them: 504 buffers instead of 3
          -- after 10,000 jobs (bench/xmin_claim.py; docs/scaling.md "A held xmin horizon").
          WHERE r.lock_key = q.lock_key || '' AND r.status IN ('queued', 'running') AND r.status > 'queued'
          ORDER BY r.lock_key, r.status OFFSET 0
      )
    ORDER BY q.priority ASC, q.available_at ASC, q.created_at ASC
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
), ranked AS (
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
    SELECT c.job_id, r.queue, 'picked', jsonb_build_object('attempt', c.attempt, 'worker', $2::text)
    FROM claimed c JOIN ranked r USING (job_id)
)
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
ORDER BY r.priority, r.available_at, r.created_at;
