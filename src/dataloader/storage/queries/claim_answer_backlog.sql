-- The key's other queued jobs, for a claimed job only (the condition on c gates the scan): the
-- runnable unparked ones first (index order: key_parked false before true), then the parked ones,
-- at most 16 rows. 16 unparked runnable: a backlog (whether any is parked behind them does not
-- matter then: key_parked_behind is true either way, and the worker parks them). Fewer: the scan
-- reaches the parked rows, if any. A hot key's 100,000 parked jobs cost at most 16 rows; never a
-- hash or a count of them (an EXISTS here was planned as a hash of every parked job: 44 ms).
-- `queued` is said as the finish's waiters say it (finish_release_keys.sql, 0046), so only
-- ix_dl_jobs_key_live serves it, by key and "not running"; ORDER BY key_parked is that index's
-- order after those two, so the walk stops at 16 rows. Said as `status = 'queued'`, a drained
-- queue's statistics made it walk the queued part of ix_dl_jobs_status_queue filtered by
-- lock_key, per claimed job.
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE NOT w.key_parked) >= 16 AS backlog, bool_or(w.key_parked) AS parked
    FROM (SELECT w.key_parked FROM dl_jobs w
          WHERE c.job_id IS NOT NULL
            AND w.lock_key = r.lock_key AND (w.status IN ('queued', 'running')) IS TRUE
            AND NOT COALESCE(w.status = 'running', false) AND w.job_id <> r.job_id
            AND (w.key_parked OR w.available_at <= now())
          ORDER BY w.key_parked
          LIMIT 16) w
) k ON true
