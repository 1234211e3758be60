-- A runner that stops (node shutdown) hands its operation back at once instead of letting the
-- lease run out: the next runner (any node) takes it at its next look. Only if $2 still holds it
-- with epoch $3. $1 operation id.
UPDATE dl_operations
SET lease_owner = NULL, lease_expires_at = now(), updated_at = now()
WHERE operation_id = $1 AND lease_owner = $2 AND lease_epoch = $3
RETURNING operation_id;
