-- The queued restartable job of a lock_key ($1), if any: read when a trigger of that key found it
-- with another task or queue (insert_restartable_job.sql returned nothing).
SELECT * FROM dl_jobs WHERE restart_key = $1 AND status = 'queued';
