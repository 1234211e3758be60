-- The claim found its lock_key's advisory lock taken. Who holds it? $1 job_id, $2 lock_key.
-- FOR SHARE waits for claims of the same key that are still committing (a claim takes the lock
-- inside its own statement), so a job claimed at the same instant is seen as running, not missed.
-- running_holders > 0: a real job holds the key; the caller re-queues at once and the holder's
-- finish wakes it. 0: the key was freed meanwhile (try again) or a fenced-off attempt's pipeline
-- still holds it (back off DL_CLAIM_BACKOFF_SEC).
WITH same_key AS (
    SELECT r.status
    FROM dl_jobs r
    -- parked jobs (0017) are never claimed, so they are not read (nor locked: a hot key has many)
    WHERE r.lock_key = $2 AND r.job_id <> $1
      AND (r.status IN ('queued', 'running')) IS TRUE AND (COALESCE(r.status = 'running', false) OR NOT r.key_parked)
    FOR SHARE
)
SELECT (SELECT count(*) FROM same_key WHERE status = 'running') AS running_holders,
       pg_try_advisory_lock(hashtext($2)) AS locked_now;
