-- Take a process's lock_key ($1) for the rest of the transaction, unless a task of it runs: then
-- nothing is taken and `running` says so. The worker running a task holds the key's advisory
-- lock; holding it here keeps any task of the process from starting until the restart commits.
-- A task that has just ended may hold it a few more milliseconds (its worker releases the key
-- after the finish commits): the caller bounds this wait with lock_timeout.
WITH running AS (
    SELECT EXISTS (SELECT 1 FROM dl_jobs WHERE lock_key = $1
                                     AND (status IN ('queued', 'running')) IS TRUE AND COALESCE(status = 'running', false)) AS yes
)
SELECT running.yes AS running,
       CASE WHEN running.yes THEN NULL ELSE pg_advisory_xact_lock(hashtext($1))::text END AS taken
FROM running
