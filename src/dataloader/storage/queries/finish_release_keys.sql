-- The end of every finish statement (finish_jobs.sql, finish_succeeded.sql, step_succeeded_claim.sql),
-- included where they say `-- @include finish_release_keys` after their `freed` CTE (the job_id
-- and lock_key of each attempt whose key this statement frees): the freed keys' waiters are woken,
-- their parked heads unparked, the locks released; finish_answer.sql then answers each input row.
-- One text for all, so the common batch and the general finish cannot drift apart in what a freed
-- key does.
waiters AS (
    -- Jobs (of any queue) may be waiting for a lock_key that just became free: wake their workers.
    -- Parked ones (0017) are not: their key's head is unparked below, which notifies its queue.
    -- 'queued' is said as `(status IN ('queued', 'running')) IS TRUE AND NOT COALESCE(status =
    -- 'running', false)` so that only ix_dl_jobs_key_live (0046: lock_key, "is running",
    -- key_parked; predicate: the first term) finds a freed key's unparked waiters, by its key,
    -- without reading its parked ones. Said as `status = 'queued'`, on a fresh database (dl_jobs
    -- not yet analyzed) PostgreSQL read the whole ix_dl_jobs_fair (every queued job) filtered by
    -- lock_key, 10 ms per finish at 20,000 queued; said as plain comparisons, after an ANALYZE of
    -- a drained queue it walked the queued part of ix_dl_jobs_status_queue (every job queued since
    -- the last vacuum: 0.5 s per finish at 2,100 jobs/s, bench/sustained.py), which can take
    -- neither term as its condition.
    SELECT pg_notify('dl_jobs', w.queue)
    FROM (
        SELECT DISTINCT q.queue
        FROM dl_jobs q
        JOIN freed e ON q.lock_key = e.lock_key
        WHERE q.lock_key = ANY (ARRAY(SELECT lock_key FROM freed))
          AND (q.status IN ('queued', 'running')) IS TRUE AND NOT COALESCE(q.status = 'running', false)
          AND NOT q.key_parked AND q.job_id <> e.job_id AND q.available_at <= now()
    ) w
), unparked AS (
    -- The freed keys' parked heads (0017) become claimable in this statement. The probe (its
    -- status said as the waiters' is, so ix_dl_jobs_key_live serves it by key: with
    -- `status = 'queued'` a drained queue's statistics made it walk ix_dl_jobs_claim, every queued
    -- job, filtered by key) spares the common path the function call; one LIMIT 1 probe per key,
    -- never a hash of every parked job.
    SELECT CASE WHEN EXISTS (SELECT 1 FROM freed f CROSS JOIN LATERAL (
                                 SELECT 1 FROM dl_jobs p
                                 WHERE p.lock_key = f.lock_key AND (p.status IN ('queued', 'running')) IS TRUE
                                   AND NOT COALESCE(p.status = 'running', false) AND p.key_parked LIMIT 1) p)
                THEN dl_unpark_key_heads(ARRAY(SELECT DISTINCT lock_key FROM freed))
                ELSE 0 END AS woken
), unlocked AS (
    SELECT i.job_id, CASE WHEN i.unlock THEN pg_advisory_unlock(hashtext(i.lock_key)) END AS unlocked
    FROM input i
)
