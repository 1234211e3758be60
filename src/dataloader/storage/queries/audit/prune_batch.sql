-- Delete one batch of audit rows older than $1 seconds (DL_AUDIT_RETENTION), oldest first: at most
-- $2 rows, from the head of ix_dl_audit_ts, so a trail with nothing old costs one index probe.
-- Run by the pruner's batch loop (retention/pruner.py `_in_batches`). Returns how many were deleted.
WITH doomed AS (
    SELECT id FROM dl_audit
    WHERE ts < now() - make_interval(secs => $1::float8)
    ORDER BY ts, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM dl_audit a USING doomed d WHERE a.id = d.id RETURNING 1
)
SELECT count(*)::bigint AS deleted FROM gone;
