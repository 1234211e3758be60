-- A worker step in one statement (issue #25): finish_succeeded.sql's finish of a batch of plain
-- successes and claim_jobs.sql's claim of up to {limit} jobs, run as one autocommit statement:
-- one round trip and one commit where the step took four (BEGIN, finish, claim, COMMIT).
-- The worker uses it only for the common step: every finish is a success that enqueues no chain
-- stage, the queue claims with the plain claim (no limit, not fair), no heartbeat is due, and no
-- finish hands over a key with parked jobs (that handoff needs the unpark committed before the
-- claim reads: the two-statement step does it). Otherwise it runs the two statements in one
-- transaction as before.
--
-- Promises, as the two statements keep them:
-- - fencing: a finish changes its row only while it is 'running' with the writer's attempt
--   (`ended`, finish_succeeded_rows.sql, as finish_succeeded.sql's), and its 'done' journal row is
--   written in this statement;
-- - the freed keys' waiters are woken, their parked heads unparked and the locks released
--   (finish_release_keys.sql, the text every finish shares);
-- - the claim is claim_jobs.sql's (claim_filters.sql, claim_take.sql, claim_answer.sql): a paused
--   queue or task claims nothing, a limited or fair queue is left to its own claim statement.
-- One snapshot for both halves: the claim sees the finished rows as still 'running'. Its
-- running-key check therefore leaves out the rows this statement ends (`input`: the same job and
-- attempt the finish's fencing matches), so a job queued behind a key whose holder finishes here
-- is claimed in this same statement, as the two-statement step claimed it after the finish. The
-- key's advisory lock is held by this session until `unlocked` releases it: the claim's
-- pg_try_advisory_lock, before or after that release (the order of the two parts is the plan's),
-- leaves the session holding the key once, for the new job (re-entrant grant then release, or
-- release then grant; a session that takes the key in between makes the claim skip the job, as
-- any lost race does). Jobs the finish unparks (a hot key's next head) are not visible to the claim
-- in this snapshot: the unpark notifies their queue and the next step claims them (the worker
-- avoids this statement when it knows a finish hands a parked key over).
--
-- Parameters: $1 queue, $2 worker (as in claim_jobs.sql); arrays, one element per attempt:
-- $3 job_id, $4 attempt, $5 max_attempts override (NULL = the row's), $6 lock_key, $7 unlock,
-- $8 result (JSON text, NULL for none) (as finish_succeeded.sql's $1..$6).
-- Answer: the finish's rows (`finished` true: job_id, status, available_at, unlocked, woken, the
-- claim's columns NULL), then the claim's rows in claim order (`finished` false: claim_jobs.sql's
-- columns, the finish's NULL).
WITH input AS (
    SELECT u.*
    FROM unnest($3::uuid[], $4::int[], $5::int[], $6::text[], $7::bool[], $8::text[])
         AS u(job_id, attempt, max_attempts, lock_key, unlock, result)
),
-- @include finish_succeeded_rows
-- @include finish_release_keys
, finish_rows AS (
-- @include finish_answer
), fence AS MATERIALIZED (
    -- the claim fence (0029; claim_filters.sql): taken once, before the walk
    SELECT dl_claim_fence($1) AS paused_tasks
), finishing AS (
    -- the attempts this statement ends: their keys are free once it is done (claim_take.sql)
    SELECT $3::uuid[] AS jobs, $4::int[] AS attempts
), candidate AS (
    SELECT q.job_id, q.queue, q.task, q.lock_key, q.priority, q.available_at, q.created_at
    FROM dl_jobs q
-- @include claim_filters
      -- claim_key_free.sql's running-key check (its `|| ''`, status terms and OFFSET 0 for the
      -- same reasons), but a row this statement finishes does not count: its key is free once the
      -- statement is done. That exclusion is a filter on the probe's few rows (NOT IN, a hashed
      -- subplan of the input, its NULLs left out so that a NULL can never hide a running job): as
      -- an anti-join, an empty analyzed table planned it as a merge with a walk of dl_jobs_pkey in
      -- job_id order, every row.
      AND NOT EXISTS (
          SELECT 1 FROM dl_jobs r
          WHERE r.lock_key = q.lock_key || '' AND (r.status IN ('queued', 'running')) IS TRUE
            AND COALESCE(r.status = 'running', false)
            AND (r.job_id, r.attempt) NOT IN (SELECT i.job_id, i.attempt FROM input i
                                              WHERE i.job_id IS NOT NULL AND i.attempt IS NOT NULL)
          OFFSET 0
      )
    ORDER BY q.priority ASC, q.available_at ASC, q.created_at ASC
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
),
-- @include claim_take
, answer AS (
-- @include claim_answer
)
SELECT true AS finished, f.job_id, f.status, f.available_at AS finish_available_at, f.unlocked, f.woken,
       NULL AS queue, NULL AS task, NULL AS args, NULL AS lock_key, NULL AS partition_key, NULL AS lease_ttl_sec,
       NULL AS attempt, NULL AS max_attempts, NULL AS attempts_before_retry, NULL AS timeout_sec,
       NULL AS chain_next, NULL AS wait_sec, NULL AS lock_hash, NULL AS request_id, NULL AS traceparent,
       NULL AS attempt_span, NULL AS claimed, NULL AS key_backlog, NULL AS key_parked_behind,
       NULL AS asked_lock, NULL AS table_pages, 0 AS pos
FROM finish_rows f
UNION ALL
SELECT false, a.job_id, NULL, NULL, NULL, NULL,
       a.queue, a.task, a.args, a.lock_key, a.partition_key, a.lease_ttl_sec, a.attempt, a.max_attempts,
       a.attempts_before_retry, a.timeout_sec, a.chain_next, a.wait_sec, a.lock_hash, a.request_id,
       a.traceparent, a.attempt_span, a.claimed, a.key_backlog, a.key_parked_behind, a.asked_lock,
       a.table_pages, a.pos
FROM (SELECT x.*, row_number() OVER () AS pos FROM answer x) a
ORDER BY finished DESC, pos;
