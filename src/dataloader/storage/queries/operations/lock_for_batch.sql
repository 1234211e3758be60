-- The start of a batch: lock the operation row for this transaction, only if runner $2 still holds
-- it with epoch $3 and it is still running. No row: the lease was taken over, or an operator
-- paused or canceled it; the runner stops without touching a job. Holding the row until commit
-- keeps a takeover (claim.sql, SKIP LOCKED) and a pause or cancel (set_state.sql) from landing in
-- the middle of the batch. $1 operation id.
SELECT operation_id, kind, filter, params, batch_size, snapshot_at, cursor_created_at, cursor_job_id,
       cursor_process_id
FROM dl_operations
WHERE operation_id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND state = 'running'
FOR UPDATE;
