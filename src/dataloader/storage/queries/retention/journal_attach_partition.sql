-- Create the journal partition $1 for [$2, $3) and attach it (dl_journal_attach_partition, 0039):
-- SHARE UPDATE EXCLUSIVE on the journal, so inserts go on; a moment's SHARE ROW EXCLUSIVE on
-- dl_jobs for the foreign key's clone and ACCESS EXCLUSIVE on the DEFAULT partition for its bound
-- check. The caller sets a short lock_timeout first (journal_lock_timeout.sql) and retries at its
-- next tick rather than queue writers behind it. Returns false when $1 exists already.
SELECT dl_journal_attach_partition($1::text, $2::timestamptz, $3::timestamptz) AS created
