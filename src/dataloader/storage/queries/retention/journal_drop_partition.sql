-- Drop journal partition $1 and put its staged survivors back (dl_journal_drop_partition, 0039):
-- ACCESS EXCLUSIVE on the journal until commit, so journal_lock_timeout.sql comes first and the
-- rows written under it are only the survivors. Returns how many rows were kept.
SELECT dl_journal_drop_partition($1::text) AS kept
