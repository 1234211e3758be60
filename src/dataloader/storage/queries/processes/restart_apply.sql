-- A restart's writes, in its transaction (the process locked by restart_lock.sql): the events the
-- restored state does not know deleted, the process put back to the state task $3 found
-- (state_before), its timer set to $4..$6 (task id, type, due time; the caller armed or suspended
-- it), the feed's 'restart' row with $7 (JSON text) and the feed's NOTIFY. `version` + 1 fences
-- off any step that read the process before. $1 ns, $2 id. $8 (JSON text, or NULL: the task's own
-- state_before): the state to put back, for an init task that ran before 0016 kept it.
WITH snap AS (
    SELECT COALESCE($8::text::jsonb, state_before) AS s FROM dl_process_tasks WHERE task_id = $3
), dropped AS (
    DELETE FROM dl_process_events e
    USING snap
    WHERE e.ns = $1 AND e.process_id = $2 AND e.event_id > (snap.s->>'last_event_id')::bigint
    RETURNING e.event_id
), proc AS (
    UPDATE dl_processes p
    SET status = snap.s->>'status',
        previous_status = p.status,
        status_changed_at = now(),
        detail = snap.s->>'detail',
        corrupted_by = (snap.s->>'corrupted_by')::uuid,
        aux_state = NULLIF(snap.s->'aux_state', 'null'::jsonb),
        aux_state_bytes = decode(snap.s->>'aux_state_bytes', 'base64'),
        metadata = COALESCE(NULLIF(snap.s->'metadata', 'null'::jsonb), '{}'::jsonb),
        last_event_id = (snap.s->>'last_event_id')::bigint,
        timer_task_id = $4, timer_type = $5, timer_at = $6,
        version = p.version + 1,
        updated_at = now()
    FROM snap
    WHERE p.ns = $1 AND p.id = $2
    RETURNING p.ns, p.id, p.status
), feed AS (
    INSERT INTO dl_process_feed (ns, process_id, kind, task_id, payload)
    SELECT ns, id, 'restart', $3, $7::text::jsonb FROM proc
), notified AS (
    SELECT pg_notify('dl_process_feed', $1) FROM proc
)
SELECT (SELECT status FROM proc) AS status, (SELECT count(*) FROM dropped) AS removed_events,
       (SELECT count(*) FROM notified) AS notified
