-- An operator's pause, resume or cancel of operation $1, by $3: a compare-and-set from the states
-- in $4 (text[]) to $2, with its audit row. Waits for a batch in flight (it holds the row), so a
-- pause lands between batches and the runner's next lock_for_batch.sql sees it. Resuming expires
-- the lease so any node's runner takes it, and wakes the runners ('dl_operations' NOTIFY);
-- canceling or pausing drops it. Returns the operation
-- as it is after the call and whether it changed (no row: no such operation).
WITH target AS (
    SELECT operation_id, state FROM dl_operations WHERE operation_id = $1 FOR UPDATE
), changed AS (
    UPDATE dl_operations o
    SET state = $2, updated_at = now(),
        lease_owner = NULL,
        lease_expires_at = CASE WHEN $2 = 'running' THEN now() ELSE NULL END,
        finished_at = CASE WHEN $2 = 'canceled' THEN now() ELSE o.finished_at END
    FROM target t
    WHERE o.operation_id = t.operation_id AND t.state = ANY ($4::text[])
    RETURNING o.*
), audit AS (
    INSERT INTO dl_operation_events (operation_id, kind, actor, payload)
    SELECT operation_id, CASE $2 WHEN 'running' THEN 'resumed' WHEN 'paused' THEN 'paused' ELSE 'canceled' END,
           $3, jsonb_build_object('done', done, 'total', total)
    FROM changed
), signal AS (
    SELECT pg_notify('dl_operations', '') FROM changed WHERE state = 'running'
)
SELECT t.state AS previous_state, (SELECT count(*) FROM changed) > 0 AS changed,
       (SELECT count(*) FROM signal) AS signaled
FROM target t;
