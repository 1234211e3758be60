-- Before a journal partition is dropped: lock FOR SHARE the jobs with rows in it that have expired
-- but could come back (failed, canceled, lost: a retry or a requeue puts them in the queue again).
-- Until the drop commits, such a retry waits, so it happens after the drop in every order: the job
-- was past its retention when its old rows went. One that came back before this statement is no
-- longer expired (the lock re-checks the row) and is staged as a survivor by the next statement,
-- which sees it in its own snapshot. Succeeded jobs never come back, so they need no lock.
-- $1 $2 the default statuses and their ages, $3 $4 $5 the per-queue overrides' queues, statuses and
-- ages, $6 the floor (journal_expired.sql), $7 the partition's name, $8 its lower bound (NULL:
-- MINVALUE), $9 its upper bound. Returns how many jobs it locked.
WITH locked AS (
    SELECT j.job_id
    FROM dl_jobs j
    WHERE j.job_id IN (SELECT e.job_id FROM dl_job_events e
                       WHERE e.tableoid = to_regclass($7::text)
                         AND e.ts >= COALESCE($8::timestamptz, '-infinity') AND e.ts < $9::timestamptz)
      AND j.status IN ('failed', 'canceled', 'lost')
      AND
-- @include retention/journal_expired
    FOR SHARE OF j
)
SELECT count(*)::bigint AS locked FROM locked
