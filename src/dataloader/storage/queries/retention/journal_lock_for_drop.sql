-- Before a journal partition is dropped: the journal's ACCESS EXCLUSIVE lock (its partitions with
-- it), without waiting: while a DROP waits for its lock, every journal insert, so every state
-- change, would wait behind it; with NOWAIT it fails at once and is tried again a moment later,
-- in a gap between writers. Held until commit: the drop and the survivors' insert only. No parameters.
LOCK TABLE dl_job_events IN ACCESS EXCLUSIVE MODE NOWAIT
