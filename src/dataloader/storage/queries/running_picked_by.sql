-- Running jobs whose current attempt was claimed by a worker found dead (jobs/reaper.py), to be taken
-- back by reap_expired.sql with their attempt as the fence. Read from the 'picked' journal row each
-- claim writes in its own statement: the worker's name and the claiming session (its backend pid,
-- the session that holds the job's lock_key). A job is taken only when that session is gone from
-- the server too: a job a live process claimed under the same name (a node restarted with a fixed
-- name) keeps its session. $1 worker names; $2 per name, claims at or after this time are not
-- taken (the start of this process's own incarnation of the name; NULL: none).
-- Reads the running jobs only (the concurrency of every node) and one journal probe each.
WITH dead(name, picked_before) AS (
    SELECT * FROM unnest($1::text[], $2::timestamptz[])
)
SELECT j.job_id, j.attempt
FROM dl_jobs j
CROSS JOIN LATERAL (
    SELECT e.payload, e.ts FROM dl_job_events e
    WHERE e.job_id = j.job_id AND e.kind = 'picked' AND (e.payload->>'attempt')::int = j.attempt
    ORDER BY e.event_id DESC
    LIMIT 1
) p
JOIN dead d ON d.name = p.payload->>'worker' AND (d.picked_before IS NULL OR p.ts < d.picked_before)
WHERE j.status = 'running'
  AND p.payload ? 'session'
  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = (p.payload->>'session')::int)
