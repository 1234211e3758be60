-- Delete one batch of fair share's served-tenant rows (dl_queue_partitions, 0024) of tenants idle
-- for more than $1 seconds: last served before the cutoff, and with no queued job of that
-- (queue, partition_key) now (delayed or due, unparked: ix_dl_jobs_fair answers per row). Without
-- this the table keeps a row for every tenant a fair queue ever served. A tenant whose row is gone
-- counts as never served when it comes back: its first job goes first, which is its due after a
-- long idle anyway. Oldest first, at most $2 rows, SKIP LOCKED (a fair claim stamping a tenant now
-- keeps its row). Returns how many rows were deleted.
-- $1 idle seconds, $2 batch size.
WITH doomed AS (
    SELECT p.queue, p.partition_key
    FROM dl_queue_partitions p
    WHERE p.served_at < now() - make_interval(secs => $1::float8)
      AND NOT EXISTS (SELECT 1 FROM dl_jobs q
                      WHERE q.status = 'queued' AND NOT q.key_parked AND q.queue = p.queue
                        AND q.partition_key = p.partition_key)
    ORDER BY p.served_at
    LIMIT $2
    FOR UPDATE OF p SKIP LOCKED
), gone AS (
    DELETE FROM dl_queue_partitions p USING doomed d
    WHERE p.queue = d.queue AND p.partition_key = d.partition_key
    RETURNING 1
)
SELECT count(*)::bigint AS deleted FROM gone;
