-- Move the rollup's watermark to $1 (in the transaction that rolled up the rows before it).
UPDATE dl_stats_state SET watermark = $1::timestamptz WHERE id = 1;
