-- The history rows of the ticks a fire enqueued (one per tick; the primary key (schedule_name,
-- tick_at) makes a tick's row unique too). Arrays of equal length.
-- $1 schedule name, $2 tick_at[], $3 job_id[], $4 lag_sec[], $5 skipped_before[].
INSERT INTO dl_schedule_runs (schedule_name, tick_at, job_id, lag_sec, skipped_before)
SELECT $1, t.tick_at, t.job_id, t.lag_sec, t.skipped_before
FROM unnest($2::timestamptz[], $3::uuid[], $4::float8[], $5::int[]) AS t(tick_at, job_id, lag_sec, skipped_before)
ON CONFLICT (schedule_name, tick_at) DO NOTHING;
