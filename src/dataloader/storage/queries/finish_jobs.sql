-- End attempts in one statement: succeeded, canceled, failed, or back to queued (retry/release).
-- Fenced per row: nothing changes for an attempt that is no longer running with its number.
-- Each row may also release its lock_key's advisory lock on this connection (same statement).
-- Arrays, one element per attempt:
-- $1 job_id, $2 attempt, $3 outcome ('succeeded'|'canceled'|'error'|'release'|'committed'), $4 error
-- text, $5 fatal (no retry), $6 max_attempts override (NULL = the row's), $7 delay in seconds before
-- the job may run again (retry/release), $8 reason (journal: a release's; an error's 'timeout' or
-- NULL), $9 lock_key, $10 unlock,
-- $11 result (JSON text, NULL for none; stored with a succeeded outcome). The result is sent as
-- text and cast here: the worker checked it is storable jsonb (outcome.encode_result), so one
-- job's result can never fail the batch; a NULL costs a null array element and no cast.
-- $12 next: the jobs its success enqueues (chains, 0011), a JSON array of complete rows built and
-- checked by the worker (workers/chaining.py), NULL for none. They are inserted only if this
-- statement ends the attempt as succeeded, so a crash can neither lose nor double a stage: the
-- stage commits with its parent's finish or not at all, and a fenced-off finish inserts nothing.
-- $13 hold: this queue holds jobs whose attempts ran out (held jobs, 0014: `failed` with held_at
-- set, journaled 'failed' with held: true); $14 error-text prefixes held at once without the retries
-- left (text[], NULL: none). A FatalError is held only by a prefix. (dataloader/model/hold.py)
-- $15 span: the attempt's own span (W3C traceparent, 0021; NULL when not traced): kept on the row as
-- attempt_span, so the next attempt's span links to it; a chain's next stages get it as their
-- traceparent (their runs are children of the attempt that enqueued them).
-- 'committed': the pipeline's ctx.transaction() already finished the job (finish_in_transaction.sql);
-- the row is left alone and only its lock is released and its key's waiters woken.
WITH input AS (
    SELECT u.*, (u.outcome = 'error' AND $14::text[] IS NOT NULL
                 AND EXISTS (SELECT 1 FROM unnest($14::text[]) AS p(prefix) WHERE starts_with(u.error, p.prefix)))
                AS held_error
    FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::bool[], $6::int[], $7::float8[],
                $8::text[], $9::text[], $10::bool[], $11::text[], $12::text[], $15::text[])
         AS u(job_id, attempt, outcome, error, fatal, max_attempts, delay_sec, reason, lock_key, unlock,
              result, next, span)
), target AS (
    SELECT j.job_id, i.attempt, i.outcome, i.error, i.fatal, i.delay_sec, i.reason, i.result, i.next, i.held_error,
           i.span,
           COALESCE(i.max_attempts, j.max_attempts) AS max_attempts,
           CASE
               WHEN i.outcome = 'succeeded' THEN 'succeeded'
               WHEN i.outcome = 'canceled' THEN 'canceled'
               -- a cancel asked for while it ran wins over a retry or a hand-back
               WHEN j.cancel_requested THEN 'canceled'
               WHEN i.outcome = 'release' THEN 'queued'
               WHEN i.held_error THEN 'failed'
               -- attempts since the last manual retry (0006) against the budget
               WHEN NOT i.fatal AND j.attempt - j.attempts_before_retry < COALESCE(i.max_attempts, j.max_attempts)
                   THEN 'queued'
               ELSE 'failed'
           END::dl_status AS new_status
    FROM dl_jobs j JOIN input i ON i.job_id = j.job_id
    -- `status::text`: the rows are found by job_id (the primary key) only; said as `status =
    -- 'running'`, an unanalyzed table let PostgreSQL AND the key lookup with a scan of
    -- ix_dl_jobs_running_lease, which holds an entry per attempt run since the last vacuum
    -- (11,000 read per finish in a 20,000-job drain).
    WHERE j.job_id = ANY ($1::uuid[]) AND j.status::text = 'running' AND j.attempt = i.attempt AND i.outcome <> 'committed'
    FOR UPDATE OF j
), ended AS (
    UPDATE dl_jobs j
    SET status = t.new_status,
        attempt = CASE WHEN t.outcome = 'release' THEN j.attempt - 1 ELSE j.attempt END,
        started_at = CASE WHEN t.outcome = 'release' AND j.attempt = 1 THEN NULL ELSE j.started_at END,
        available_at = CASE WHEN t.new_status = 'queued' AND t.outcome = 'release'
                                 AND t.reason IN ('lock_busy', 'claimed_ahead') AND t.delay_sec = 0
                            -- put back at once because its key's holder (a job of ours whose
                            -- ctx.transaction() committed, lock not yet released) is finishing, or
                            -- given back unstarted by a worker that claimed it ahead
                            -- (workers/claim_ahead.py): it keeps its place in line, so jobs of one
                            -- key run in order
                            THEN LEAST(j.available_at, now())
                            WHEN t.new_status = 'queued'
                            -- clamped (a year; NaN counts as 0) so no delay can overflow the interval
                            THEN now() + make_interval(secs => CASE WHEN t.delay_sec = 'NaN' THEN 0
                                                                    ELSE LEAST(GREATEST(t.delay_sec, 0), 31536000)
                                                               END)
                            ELSE j.available_at END,
        error = CASE WHEN t.outcome = 'succeeded' THEN NULL
                     WHEN t.outcome IN ('error', 'canceled') THEN t.error
                     WHEN t.new_status = 'canceled' THEN 'canceled by request'
                     ELSE j.error END,
        lease_expires_at = NULL,
        -- the pipeline's override decided: keep it, so status, listings and the reaper agree
        max_attempts = t.max_attempts,
        result = CASE WHEN t.new_status = 'succeeded' THEN t.result::jsonb ELSE j.result END,
        -- a job that starts a chain becomes its first stage
        chain_id = CASE WHEN t.new_status = 'succeeded' AND t.next IS NOT NULL
                        THEN COALESCE(j.chain_id, j.job_id) ELSE j.chain_id END,
        finished_at = CASE WHEN t.new_status = 'queued' THEN NULL ELSE now() END,
        attempt_span = COALESCE(t.span, j.attempt_span),
        held_at = CASE WHEN t.new_status = 'failed' AND t.outcome = 'error' AND (t.held_error OR ($13::boolean AND NOT t.fatal))
                       THEN now() ELSE j.held_at END,
        held_reason = CASE WHEN t.new_status = 'failed' AND t.outcome = 'error' AND t.held_error THEN 'held_error'
                           WHEN t.new_status = 'failed' AND t.outcome = 'error' AND $13::boolean AND NOT t.fatal
                               THEN 'attempts_exhausted' ELSE j.held_reason END
    FROM target t
    WHERE j.job_id = ANY ($1::uuid[]) AND j.job_id = t.job_id
    RETURNING j.job_id, j.queue, j.status, j.available_at, j.lock_key, t.attempt, t.outcome, t.error,
              t.fatal, t.reason, j.chain_id, t.next, j.held_reason, t.span
),
-- @include finish_chain_next
journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT e.job_id, e.queue,
           CASE
               WHEN e.status = 'succeeded' THEN 'done'
               WHEN e.status = 'canceled' THEN 'canceled'
               WHEN e.status = 'failed' THEN 'failed'
               ELSE 'requeue'
           END,
           jsonb_strip_nulls(jsonb_build_object(
               'attempt', e.attempt,
               'error', e.error,
               'fatal', CASE WHEN e.fatal THEN true END,
               'held', CASE WHEN e.status = 'failed' AND e.held_reason IS NOT NULL THEN e.held_reason END,
               'reason', CASE WHEN e.outcome = 'release' THEN e.reason
                              -- an error with a reason of its own: 'timeout' (the run-time limit)
                              WHEN e.outcome = 'error' AND e.reason IS NOT NULL AND e.status <> 'canceled'
                                  THEN e.reason
                              WHEN e.outcome = 'error' AND e.status = 'queued' THEN 'retry' END,
               'available_at', CASE WHEN e.status = 'queued' THEN e.available_at END,
               'next_jobs', CASE WHEN e.status = 'succeeded' AND e.next IS NOT NULL
                                 THEN jsonb_array_length(e.next::jsonb) END))
    FROM ended e
),
freed AS (
    SELECT job_id, lock_key FROM ended
    UNION ALL
    SELECT job_id, lock_key FROM input WHERE outcome = 'committed'
),
-- @include finish_release_keys
-- @include finish_answer
;
