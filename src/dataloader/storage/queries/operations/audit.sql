-- One audit row of operation $1: kind $2, payload $3 (JSON text), by the runner (no actor).
INSERT INTO dl_operation_events (operation_id, kind, actor, payload)
VALUES ($1, $2, NULL, $3::text::jsonb)
