-- A new bulk operation and its 'created' audit row, in one statement. It starts `running` with an
-- expired lease (lease_expires_at = now()), so the runner of any node may take it, and a
-- 'dl_operations' NOTIFY (sent at commit) wakes the runners to look now.
-- $1 id, $2 kind, $3 filter (jsonb), $4 params (jsonb), $5 total (the dry-run count), $6 batch
-- size, $7 started_by, $8 snapshot time (jobs created after it are left alone).
WITH op AS (
    INSERT INTO dl_operations (operation_id, kind, filter, params, total, batch_size, started_by, snapshot_at,
                               lease_expires_at)
    VALUES ($1, $2, $3::jsonb, $4::jsonb, $5, $6, $7, $8, now())
    RETURNING *
), audit AS (
    INSERT INTO dl_operation_events (operation_id, kind, actor, payload)
    SELECT operation_id, 'created', started_by,
           jsonb_build_object('kind', kind, 'filter', filter, 'params', params, 'total', total)
    FROM op
), signal AS (
    SELECT pg_notify('dl_operations', '') FROM op
)
SELECT op.*, (SELECT count(*) FROM signal) AS signaled FROM op;
