-- Create an observer: 'created', waiting for a node with spare capacity (wakes them with one
-- NOTIFY). A live name inserts nothing (the caller reports 409); a 'deleted' one is created
-- afresh under its name, keeping `epoch` counting up so no write of its earlier life can match.
-- $1 name, $2 kind, $3 args (JSON text), $4 max_restarts (null: no limit)
WITH upserted AS (
    INSERT INTO dl_observers (name, kind, args, max_restarts)
    VALUES ($1, $2, $3::text::jsonb, $4)
    ON CONFLICT (name) DO UPDATE
    SET kind = EXCLUDED.kind, args = EXCLUDED.args, max_restarts = EXCLUDED.max_restarts,
        desired = 'run', state = 'created', node_id = NULL, failures = 0, moves = 0,
        restart_at = now(), reason = NULL, last_error = NULL, last_error_at = NULL,
        checkpoint = NULL, status = NULL, created_at = now(), updated_at = now(), started_at = NULL,
        stop_requested_at = NULL, stopped_at = NULL
    WHERE dl_observers.state = 'deleted'
    RETURNING *
), signal AS (
    SELECT pg_notify('dl_observers', 'wake') AS sent FROM upserted
)
SELECT u.*, (SELECT count(*) FROM signal)::int AS signaled FROM upserted u;
