-- The rows of journal partition $1 ([$2, $3); $2 NULL: from the beginning) as the archive writes
-- them, read before the partition is dropped (retention/partition_archive.py): the job, the time and
-- the whole row as JSON text (to_jsonb: the journal's own column names, spliced into the file as
-- is). tableoid keeps it to that partition's rows, never the DEFAULT's; the range lets the planner
-- prune to that one partition. Read through a cursor: a day's partition is never held in memory.
SELECT e.job_id, e.ts, to_jsonb(e)::text AS row_json
FROM dl_job_events e
WHERE e.tableoid = to_regclass($1::text)
  AND e.ts >= COALESCE($2::timestamptz, '-infinity') AND e.ts < $3::timestamptz
