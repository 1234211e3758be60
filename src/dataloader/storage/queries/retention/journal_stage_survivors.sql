-- Copy the rows of journal partition $1 ([$2, $3)) whose job survives into dl_journal_survivors:
-- a job still in dl_jobs that the retention policy keeps (queued, running, held, a status kept for
-- ever, or finished within its age: the negation of journal_expired.sql). The only rows of the
-- partition that are written again; the rest go with the DROP. One read of the partition (tableoid:
-- its rows only, never the DEFAULT's), each row's job found by primary key.
-- $1-$3 as journal_lock_expired.sql, $4-$9 the policy. Returns how many rows were staged.
WITH staged AS (
    INSERT INTO dl_journal_survivors (event_id, job_id, queue, ts, kind, payload)
    SELECT e.event_id, e.job_id, e.queue, e.ts, e.kind, e.payload
    FROM dl_job_events e
    JOIN dl_jobs j ON j.job_id = e.job_id
    WHERE e.tableoid = to_regclass($1::text)
      AND e.ts >= COALESCE($2::timestamptz, '-infinity') AND e.ts < $3::timestamptz
      AND NOT (
-- @include retention/journal_expired
      )
    RETURNING 1
)
SELECT count(*)::bigint AS staged FROM staged
