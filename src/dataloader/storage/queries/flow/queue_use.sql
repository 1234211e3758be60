-- One queue's current use on all nodes: its running and queued jobs (for the answer of a pause or
-- a resume, which shows the state it leaves the queue in). An operator read, from the partial
-- indexes of queued and running jobs.
-- $1 queue.
SELECT count(*) FILTER (WHERE status = 'running') AS running,
       count(*) FILTER (WHERE status = 'queued') AS queued
FROM dl_jobs
WHERE status IN ('queued', 'running') AND queue = $1;
