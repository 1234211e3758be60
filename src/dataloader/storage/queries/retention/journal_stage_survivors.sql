-- Copy the rows of journal partition $7 ([$8, $9)) whose job survives into dl_journal_survivors:
-- a job still in dl_jobs that the retention policy keeps (queued, running, held, a status kept for
-- ever, or finished within its age: the negation of journal_expired.sql). The only rows of the
-- partition that are written again; the rest go with the DROP. One read of the partition (tableoid:
-- its rows only, never the DEFAULT's) for its jobs, each job's row found once by primary key, then
-- the survivors' rows through ix_dl_job_events_job.
-- $1 $2 the default statuses and their ages, $3 $4 $5 the per-queue overrides' queues, statuses and
-- ages, $6 the floor (journal_expired.sql). Returns how many rows were staged.
WITH keep AS (
    -- each job of the partition once (a hash of its job ids), its row by primary key
    SELECT j.job_id
    FROM dl_jobs j
    WHERE j.job_id IN (SELECT e.job_id FROM dl_job_events e
                       WHERE e.tableoid = to_regclass($7::text)
                         AND e.ts >= COALESCE($8::timestamptz, '-infinity') AND e.ts < $9::timestamptz)
      AND NOT (
-- @include retention/journal_expired
      )
    -- the foreign key's lock, taken now, before the journal's table lock: putting the rows back
    -- under that lock then never waits on a job row another transaction holds
    FOR KEY SHARE OF j
), staged AS (
    INSERT INTO dl_journal_survivors (event_id, job_id, queue, ts, kind, payload)
    SELECT e.event_id, e.job_id, e.queue, e.ts, e.kind, e.payload
    FROM keep k
    JOIN dl_job_events e ON e.job_id = k.job_id
    WHERE e.tableoid = to_regclass($7::text)
      AND e.ts >= COALESCE($8::timestamptz, '-infinity') AND e.ts < $9::timestamptz
    RETURNING 1
)
SELECT count(*)::bigint AS staged FROM staged
