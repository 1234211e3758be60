-- Take the oldest running operation whose lease has expired (never taken, or its runner died or
-- stopped renewing) for runner $1, for $2 seconds. A compare-and-set: SKIP LOCKED leaves an
-- operation whose batch is being committed right now to its runner (the batch holds the row), and
-- lease_epoch + 1 fences the previous runner off: every batch re-checks (owner, epoch) under the
-- row lock. Journals 'started' or 'taken_over' (with the previous owner) in the same statement.
WITH candidate AS (
    SELECT operation_id, lease_owner
    FROM dl_operations
    WHERE state = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < now())
    ORDER BY created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE dl_operations o
    SET lease_owner = $1, lease_expires_at = now() + make_interval(secs => $2::float8),
        lease_epoch = o.lease_epoch + 1, updated_at = now()
    FROM candidate c
    WHERE o.operation_id = c.operation_id
    RETURNING o.*, c.lease_owner AS previous_owner
), audit AS (
    INSERT INTO dl_operation_events (operation_id, kind, actor, payload)
    SELECT operation_id, CASE WHEN previous_owner IS NULL THEN 'started' ELSE 'taken_over' END, $1,
           jsonb_strip_nulls(jsonb_build_object('previous_owner', previous_owner, 'epoch', lease_epoch,
                                                'done', done, 'total', total))
    FROM taken
)
SELECT * FROM taken;
