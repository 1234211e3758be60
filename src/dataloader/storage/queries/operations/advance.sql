-- The end of a batch, in its transaction: move the cursor past the last job examined ($2/$3,
-- NULL: none), count $4 examined and $5 changed, renew runner's lease for $6 seconds, and when $7
-- (the batch came back short: nothing is left) finish the operation with its 'finished' audit
-- row. $1 operation id (locked by lock_for_batch.sql in this transaction). $8: the last process id
-- examined, for a process operation's cursor (NULL: none, or a job operation). $9 of those examined,
-- how many were refused for a reason of their own (a workflow operation's `failed`; 0 otherwise).
WITH advanced AS (
    UPDATE dl_operations
    SET cursor_created_at = COALESCE($2::timestamptz, cursor_created_at),
        cursor_job_id = COALESCE($3::uuid, cursor_job_id),
        cursor_process_id = COALESCE($8::text, cursor_process_id),
        done = done + $4::bigint, changed = changed + $5::bigint, failed = failed + $9::bigint,
        lease_expires_at = now() + make_interval(secs => $6::float8), updated_at = now(),
        state = CASE WHEN $7::boolean THEN 'finished' ELSE state END,
        finished_at = CASE WHEN $7::boolean THEN now() ELSE finished_at END,
        lease_owner = CASE WHEN $7::boolean THEN NULL ELSE lease_owner END
    WHERE operation_id = $1
    RETURNING *
), audit AS (
    INSERT INTO dl_operation_events (operation_id, kind, actor, payload)
    SELECT operation_id, 'finished', NULL, jsonb_build_object('done', done, 'changed', changed, 'failed', failed, 'total', total)
    FROM advanced WHERE state = 'finished'
)
SELECT * FROM advanced;
