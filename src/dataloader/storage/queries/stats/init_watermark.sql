-- Create the rollup's watermark on first use: rows finished before $1 are not rolled up (the
-- stats service starts from its keep window). A no-op once the row exists.
INSERT INTO dl_stats_state (id, watermark) VALUES (1, $1::timestamptz)
ON CONFLICT (id) DO NOTHING;
