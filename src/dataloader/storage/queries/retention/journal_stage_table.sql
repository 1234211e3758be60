-- The temporary table the survivors of a dropped journal partition wait in, for the rest of the
-- transaction (journal_stage_survivors.sql fills it, dl_journal_drop_partition of 0039 empties it
-- into the journal). No parameters.
CREATE TEMPORARY TABLE IF NOT EXISTS dl_journal_survivors (LIKE dl_job_events) ON COMMIT DROP
