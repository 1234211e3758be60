-- The DEFAULT partition's ACCESS EXCLUSIVE lock, without waiting (journal_lock_for_attach.sql
-- says why), for ATTACH's bound check. No parameters.
LOCK TABLE dl_job_events_default IN ACCESS EXCLUSIVE MODE NOWAIT
