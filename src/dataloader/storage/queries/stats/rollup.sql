-- Roll up the jobs that finished in [$1, $2) into the hourly tables (migration 0009), in one
-- statement so the buckets and the error groups move together. $3: the upper bounds of the
-- histogram buckets in seconds (float8[], ascending; retention/stats.py). The caller advances
-- dl_stats_state.watermark to $2 in the same transaction, under its row lock, so every finished
-- job is counted once even if two nodes briefly both think they lead.
--
-- Which rows: finished_at in [$1, $2), found per (queue, status) as one range of
-- ix_dl_jobs_finished; the queues by a loose scan of the same index.
-- What is measured, per job, from its journal: the job's last "went to the queue or was claimed"
-- event (kinds queued, requeue, retry, release, picked). When that is `picked`, the last attempt
-- ran: run_sec = finished_at - that claim, wait_sec = that claim - the moment the attempt became
-- runnable (GREATEST(created_at, available_at), as dl_job_queue_wait_seconds measures it). A job
-- that ended without running (canceled while queued) counts in `jobs` only. Times are clamped
-- so no stored value (±infinity, a created_at in the future) can overflow or go negative.
-- Error groups (failed and lost jobs): the first line of `error`, trimmed, at most 200 characters.
WITH RECURSIVE
-- @include finished_queues_walk
, src AS MATERIALIZED (
    SELECT j.job_id, j.queue, j.status::text AS status, j.finished_at, j.error,
           date_trunc('hour', j.finished_at, 'UTC') AS hour,
           CASE WHEN p.kind = 'picked' THEN
               GREATEST(extract(epoch FROM j.finished_at - LEAST(p.ts, j.finished_at))::float8, 0)
           END AS run_sec,
           CASE WHEN p.kind = 'picked' THEN
               GREATEST(extract(epoch FROM p.ts - GREATEST(LEAST(GREATEST(j.created_at, j.available_at), p.ts),
                                                           timestamptz '1970-01-01 00:00:00+00'))::float8, 0)
           END AS wait_sec
    FROM queues q
    CROSS JOIN unnest(ARRAY['succeeded', 'failed', 'canceled', 'lost']::dl_status[]) AS s(status)
    JOIN LATERAL (
        SELECT f.job_id, f.queue, f.status, f.finished_at, f.error, f.created_at, f.available_at
        FROM dl_jobs f
        WHERE f.queue = q.queue AND f.status = s.status
          AND f.status IN ('succeeded', 'failed', 'canceled', 'lost')
          AND f.finished_at >= $1::timestamptz AND f.finished_at < $2::timestamptz
    ) j ON true
    LEFT JOIN LATERAL (
        SELECT e.kind, e.ts
        FROM dl_job_events e
        WHERE e.job_id = j.job_id AND e.kind IN ('picked', 'queued', 'requeue', 'retry', 'release')
        ORDER BY e.event_id DESC
        LIMIT 1
    ) p ON true
    WHERE q.queue IS NOT NULL
), hourly AS (
    INSERT INTO dl_stats_hourly AS t (hour, queue, status, jobs, run_count, run_sum, run_max,
                                      wait_count, wait_sum, wait_max)
    SELECT hour, queue, status, count(*), count(run_sec), COALESCE(sum(run_sec), 0), max(run_sec),
           count(wait_sec), COALESCE(sum(wait_sec), 0), max(wait_sec)
    FROM src
    GROUP BY hour, queue, status
    ON CONFLICT (hour, queue, status) DO UPDATE
    SET jobs = t.jobs + excluded.jobs,
        run_count = t.run_count + excluded.run_count,
        run_sum = t.run_sum + excluded.run_sum,
        run_max = GREATEST(t.run_max, excluded.run_max),
        wait_count = t.wait_count + excluded.wait_count,
        wait_sum = t.wait_sum + excluded.wait_sum,
        wait_max = GREATEST(t.wait_max, excluded.wait_max)
), hist AS (
    INSERT INTO dl_stats_hist AS t (hour, queue, status, metric, bucket, jobs)
    SELECT hour, queue, status, metric, bucket, count(*)
    FROM (
        SELECT hour, queue, status, 'run' AS metric, width_bucket(run_sec, $3::float8[]) AS bucket
        FROM src WHERE run_sec IS NOT NULL
        UNION ALL
        SELECT hour, queue, status, 'wait', width_bucket(wait_sec, $3::float8[])
        FROM src WHERE wait_sec IS NOT NULL
    ) b
    GROUP BY hour, queue, status, metric, bucket
    ON CONFLICT (hour, queue, status, metric, bucket) DO UPDATE
    SET jobs = t.jobs + excluded.jobs
), errors AS (
    INSERT INTO dl_stats_errors AS t (hour, queue, error, jobs, last_at, last_job_id)
    SELECT hour, queue, error_group, count(*), max(finished_at),
           (array_agg(job_id ORDER BY finished_at DESC, job_id))[1]
    FROM (
        SELECT hour, queue, finished_at, job_id,
               COALESCE(NULLIF(left(btrim(split_part(error, E'\n', 1), E' \t\r'), 200), ''),
                        '(no error text)') AS error_group
        FROM src
        WHERE status IN ('failed', 'lost')
    ) e
    GROUP BY hour, queue, error_group
    ON CONFLICT (hour, queue, error) DO UPDATE
    SET jobs = t.jobs + excluded.jobs,
        last_job_id = CASE WHEN excluded.last_at >= t.last_at THEN excluded.last_job_id ELSE t.last_job_id END,
        last_at = GREATEST(t.last_at, excluded.last_at)
)
SELECT count(*)::bigint AS jobs FROM src;
