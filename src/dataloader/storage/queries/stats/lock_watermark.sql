-- The rollup's watermark, locked for this transaction: the rollup of [watermark, $hi) and the
-- move of the watermark commit together, and a second node rolling up at the same time waits
-- here and then starts from the moved watermark (no job counted twice).
SELECT watermark, now() AS now FROM dl_stats_state WHERE id = 1 FOR UPDATE;
