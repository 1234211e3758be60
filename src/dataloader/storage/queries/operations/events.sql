-- The audit trail of operation $1, oldest first (it stays after the operation ends).
SELECT event_id, operation_id, ts, kind, actor, payload
FROM dl_operation_events
WHERE operation_id = $1
ORDER BY event_id;
