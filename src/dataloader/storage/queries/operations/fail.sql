-- An operation whose batch cannot succeed (its filter became invalid, a bug): failed with the
-- error, and its audit row. Only if runner $2 still holds it with epoch $3. $1 id, $4 error text.
WITH failed AS (
    UPDATE dl_operations
    SET state = 'failed', error = $4, finished_at = now(), updated_at = now(), lease_owner = NULL
    WHERE operation_id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND state = 'running'
    RETURNING operation_id
), audit AS (
    INSERT INTO dl_operation_events (operation_id, kind, actor, payload)
    SELECT operation_id, 'failed', $2, jsonb_build_object('error', $4::text) FROM failed
)
SELECT operation_id FROM failed;
