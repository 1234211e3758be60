-- finish_jobs.sql for the common batch: every attempt in it succeeded and enqueues no chain stage.
-- It writes the very rows finish_jobs.sql writes for such attempts ('succeeded', its result, the
-- 'done' journal row, the key's waiters woken, its lock released), without the parts only a
-- failure, a retry, a release or a chain needs: those are two more inserts, the held-jobs rule and
-- the outcome decision, and PostgreSQL starts and ends every part of a statement on each call
-- even when it writes nothing (about 200 µs of the server's time per batch, measured on 16 jobs).
-- Fenced per row as there: nothing changes for an attempt that is no longer running with its number.
-- Arrays, one element per attempt: $1 job_id, $2 attempt, $3 max_attempts override (NULL = the
-- row's), $4 lock_key, $5 unlock, $6 result (JSON text, NULL for none).
WITH input AS (
    SELECT u.*
    FROM unnest($1::uuid[], $2::int[], $3::int[], $4::text[], $5::bool[], $6::text[])
         AS u(job_id, attempt, max_attempts, lock_key, unlock, result)
), ended AS (
    UPDATE dl_jobs j
    SET status = 'succeeded',
        error = NULL,
        lease_expires_at = NULL,
        max_attempts = COALESCE(i.max_attempts, j.max_attempts),
        result = i.result::jsonb,
        finished_at = now()
    FROM input i
    -- `status::text`: the rows are found by job_id (the primary key) only; said as `status =
    -- 'running'`, an unanalyzed table let PostgreSQL AND the key lookup with a scan of
    -- ix_dl_jobs_running_lease, which holds an entry per attempt run since the last vacuum
    -- (11,000 read per finish in a 20,000-job drain).
    WHERE j.job_id = ANY ($1::uuid[]) AND j.job_id = i.job_id AND j.status::text = 'running' AND j.attempt = i.attempt
    RETURNING j.job_id, j.queue, j.status, j.available_at, j.lock_key, i.attempt
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT e.job_id, e.queue, 'done', jsonb_build_object('attempt', e.attempt)
    FROM ended e
), freed AS (
    SELECT job_id, lock_key FROM ended
),
-- @include finish_release_keys
-- @include finish_answer
;
