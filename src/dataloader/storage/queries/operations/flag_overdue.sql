-- Queue-time limits (issue 11): find queued jobs that have waited past their queue's limit since
-- they became runnable (available_at), and either flag them (queue_overdue_at = now(), journal
-- 'queue_overdue') or fail them (status failed, journal 'failed' with reason 'queue_timeout'), as
-- the queue is set. A compare-and-set: only a row still `queued`, not flagged since it last became
-- runnable, taken with SKIP LOCKED (a claim in progress wins), so two checkers (every node runs
-- one) never flag or fail a job twice and a job being claimed is left to run.
-- $1 queues with limits of their own (text[]), $2 their limits in seconds (float8[]), $3 whether
-- each fails its overdue jobs (bool[]); $4 the limit of every other queue (0: none), $5 whether
-- those fail; $6 at most this many jobs per queue per call; $7 look back only this many seconds
-- past each limit (NULL: everything; the checker's first tick), so a long backlog already flagged
-- is not read again on every tick.
-- The queues come from a loose scan of ix_dl_jobs_claim_order; each queue's overdue jobs from one
-- range of ix_dl_jobs_claim (queue, available_at) WHERE status = 'queued'.
WITH RECURSIVE queues AS (
    (SELECT queue FROM dl_jobs WHERE status = 'queued' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM dl_jobs j WHERE j.status = 'queued' AND j.queue > q.queue ORDER BY j.queue LIMIT 1)
    FROM queues q
    WHERE q.queue IS NOT NULL
), limits AS (
    SELECT q.queue, COALESCE(l.limit_sec, $4::float8) AS limit_sec, COALESCE(l.fail, $5::boolean) AS fail
    FROM queues q
    LEFT JOIN unnest($1::text[], $2::float8[], $3::boolean[]) AS l(queue, limit_sec, fail) ON l.queue = q.queue
    WHERE q.queue IS NOT NULL
), overdue AS (
    SELECT o.job_id, l.limit_sec, l.fail
    FROM limits l
    CROSS JOIN LATERAL (
        SELECT j.job_id
        FROM dl_jobs j
        WHERE j.queue = l.queue AND j.status = 'queued'
          AND j.available_at < now() - make_interval(secs => l.limit_sec)
          AND ($7::float8 IS NULL OR j.available_at >= now() - make_interval(secs => l.limit_sec + $7::float8))
          AND (j.queue_overdue_at IS NULL OR j.queue_overdue_at < j.available_at)
        ORDER BY j.available_at
        LIMIT $6
        FOR UPDATE SKIP LOCKED
    ) o
    WHERE l.limit_sec > 0
), changed AS (
    UPDATE dl_jobs j
    SET queue_overdue_at = now(),
        status = CASE WHEN o.fail THEN 'failed' ELSE j.status END::dl_status,
        finished_at = CASE WHEN o.fail THEN now() ELSE j.finished_at END,
        error = CASE WHEN o.fail THEN 'queue time limit exceeded: waited more than ' || o.limit_sec || ' s to start'
                     ELSE j.error END
    FROM overdue o
    WHERE j.job_id = o.job_id AND j.status = 'queued'
    RETURNING j.job_id, j.queue, j.task, j.status, j.available_at, o.limit_sec
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, CASE WHEN status = 'failed' THEN 'failed' ELSE 'queue_overdue' END,
           jsonb_build_object('reason', 'queue_timeout', 'limit_sec', limit_sec,
                              'waited_sec', round(extract(epoch FROM now() - available_at)::numeric, 3))
    FROM changed
)
SELECT job_id, queue, task, status::text AS status FROM changed;
