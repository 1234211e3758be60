-- Whether a new step may run its function now: the run's job is still running with this attempt and
-- its lease has not run out by the database's clock. An attempt whose lease the reaper took back (a
-- zombie: its node stalled past the lease) finds its job requeued or claimed again with another
-- attempt, whose replay may already have recorded this very position; running the step then would
-- run a recorded step again. Past this check, the attempt's own lease clock stops it before anyone
-- else can take the job (workers/lease_guard.py). $1 run id, $2 attempt.
-- Returns the seconds the lease has left by the database's clock (NULL: the step may not start): the
-- attempt needs not ask again while that time, less a margin, has not passed on its own clock.
SELECT (SELECT EXTRACT(epoch FROM lease_expires_at - now())::float8 FROM dl_jobs
        WHERE job_id = $1 AND status::text = 'running' AND attempt = $2 AND lease_expires_at > now())
