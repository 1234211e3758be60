-- A runner that stops (node shutdown) hands its operation back at once instead of letting the
-- lease run out, and wakes the runners of the other nodes ('dl_operations' NOTIFY) to take it
-- now. Only if $2 still holds it with epoch $3. $1 operation id.
WITH released AS (
    UPDATE dl_operations
    SET lease_owner = NULL, lease_expires_at = now(), updated_at = now()
    WHERE operation_id = $1 AND lease_owner = $2 AND lease_epoch = $3
    RETURNING operation_id
), signal AS (
    SELECT pg_notify('dl_operations', '') FROM released
)
SELECT operation_id, (SELECT count(*) FROM signal) AS signaled FROM released;
