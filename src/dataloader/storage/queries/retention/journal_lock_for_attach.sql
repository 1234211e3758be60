-- Before a journal partition is attached: take, without waiting, the locks ATTACH needs beyond the
-- journal's own SHARE UPDATE EXCLUSIVE: SHARE ROW EXCLUSIVE on dl_jobs (the foreign key's clone)
-- and ACCESS EXCLUSIVE on the DEFAULT partition (its bound check). NOWAIT: a lock request that
-- waits is a queue every claim and finish would join; this one fails at once instead and is tried
-- again a moment later, so the DDL only runs in a gap between writers. No parameters.
LOCK TABLE dl_jobs IN SHARE ROW EXCLUSIVE MODE NOWAIT
