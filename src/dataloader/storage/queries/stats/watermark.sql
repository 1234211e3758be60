-- The time up to which finished jobs are rolled up (NULL: never rolled up yet).
SELECT (SELECT watermark FROM dl_stats_state WHERE id = 1) AS watermark, now() AS now;
