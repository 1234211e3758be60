-- The current use of queue $1's limits, for `held_back` in its state (GET /api/v1/queues, the
-- change answers) and the dl_flow_* gauges at scrape time: running jobs, runnable jobs (queued, due,
-- not parked behind a running lock_key), starts in the queue rate's window, and the runnable jobs
-- that partition keys at their limit hold back (per partition key: its runnable jobs beyond what
-- its limit leaves; summed). An operator read for a queue with limits only (the caller checks),
-- not a hot path: it groups the queue's runnable jobs by partition key (the claim-order index and
-- the rows), and dl_flow_starts by its (queue, partition_key, started_at) index.
-- $1 queue.
WITH f AS (
    SELECT * FROM dl_queue_flow WHERE queue = $1
), runnable AS (
    SELECT q.partition_key, count(*) AS n FROM dl_jobs q
    WHERE q.status = 'queued' AND q.queue = $1 AND q.available_at <= now() AND NOT q.key_parked
    GROUP BY q.partition_key
), running AS (
    SELECT r.partition_key, count(*) AS n FROM dl_jobs r
    WHERE r.status = 'running' AND r.queue = $1
    GROUP BY r.partition_key
), partition_starts AS (
    SELECT s.partition_key, count(*) AS n FROM dl_flow_starts s, f
    WHERE s.queue = $1 AND f.partition_rate_limit IS NOT NULL AND s.started_at <= statement_timestamp()
      AND s.started_at > statement_timestamp() - make_interval(secs => f.partition_rate_period_sec)
    GROUP BY s.partition_key
)
SELECT (SELECT COALESCE(sum(n), 0) FROM running)::bigint AS running,
       (SELECT COALESCE(sum(n), 0) FROM runnable)::bigint AS runnable,
       (SELECT count(*) FROM dl_flow_starts s, f
        WHERE s.queue = $1 AND f.rate_limit IS NOT NULL AND s.started_at <= statement_timestamp()
          AND s.started_at > statement_timestamp() - make_interval(secs => f.rate_period_sec))::bigint AS starts,
       (SELECT COALESCE(sum(GREATEST(0, u.n - GREATEST(0, f.partition_concurrency - COALESCE(r.n, 0)))), 0)
        FROM runnable u LEFT JOIN running r USING (partition_key), f
        WHERE f.partition_concurrency IS NOT NULL)::bigint AS partition_concurrency_held,
       (SELECT COALESCE(sum(GREATEST(0, u.n - GREATEST(0, f.partition_rate_limit - COALESCE(s.n, 0)))), 0)
        FROM runnable u LEFT JOIN partition_starts s USING (partition_key), f
        WHERE f.partition_rate_limit IS NOT NULL)::bigint AS partition_rate_held;
