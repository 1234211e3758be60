-- finish_jobs.sql for the common batch: every attempt in it succeeded and enqueues no chain stage.
-- It writes the very rows finish_jobs.sql writes for such attempts ('succeeded', its result, the
-- 'done' journal row, the key's waiters woken, its lock released), without the parts only a
-- failure, a retry, a release or a chain needs: those are two more inserts, the held-jobs rule and
-- the outcome decision, and PostgreSQL starts and ends every part of a statement on each call
-- even when it writes nothing (about 200 µs of the server's time per batch, measured on 16 jobs).
-- Arrays, one element per attempt: $1 job_id, $2 attempt, $3 max_attempts override (NULL = the
-- row's), $4 lock_key, $5 unlock, $6 result (JSON text, NULL for none).
WITH input AS (
    SELECT u.*
    FROM unnest($1::uuid[], $2::int[], $3::int[], $4::text[], $5::bool[], $6::text[])
         AS u(job_id, attempt, max_attempts, lock_key, unlock, result)
),
-- @include finish_succeeded_rows
-- @include finish_release_keys
-- @include finish_answer
;
