-- The writes of one step, in one statement inside the step's transaction (which also finishes the
-- step's job, fenced: finish_in_transaction.sql): the process's new state, its new events, their
-- feed rows and the lifecycle rows, the task's end, and a NOTIFY for the caller waiting on it.
-- Compare-and-set on `version` ($4): nothing is written if the process changed since the step
-- read it (removed, or changed by the API); `applied` says so. The task keeps the state it found
-- (state_before) for a restart from it.
-- $1 ns, $2 process id, $3 task id, $4 version read, $5 new status, $6 set aux_state?, $7 aux_state
-- (JSON text), $8 aux_state bytes, $9 set metadata?, $10 metadata (JSON text), $11 event payloads
-- (JSON text[]), $12 event metadata (JSON text[]), $13 response (JSON text), $14 task status
-- ('finished' | 'error' | 'cancelled'), $15 task error, $16 detail, $17 corrupted_by, $18 timer
-- task id, $19 timer type, $20 timer due time, $21 lifecycle kinds for the feed (text[]), $22
-- their payload (JSON text).
WITH proc AS (
    UPDATE dl_processes p
    SET status = $5,
        previous_status = CASE WHEN p.status <> $5 THEN p.status ELSE p.previous_status END,
        status_changed_at = CASE WHEN p.status <> $5 THEN now() ELSE p.status_changed_at END,
        detail = $16,
        corrupted_by = $17,
        aux_state = CASE WHEN $6 THEN $7::text::jsonb ELSE p.aux_state END,
        aux_state_bytes = CASE WHEN $6 THEN $8::bytea ELSE p.aux_state_bytes END,
        metadata = CASE WHEN $9 THEN $10::text::jsonb ELSE p.metadata END,
        last_event_id = p.last_event_id + cardinality($11::text[]),
        timer_task_id = $18,
        timer_type = $19,
        timer_at = $20,
        version = p.version + 1,
        updated_at = now()
    WHERE p.ns = $1 AND p.id = $2 AND p.version = $4
    RETURNING p.ns, p.id, p.last_event_id
), events AS (
    INSERT INTO dl_process_events (ns, process_id, event_id, task_id, payload, metadata)
    SELECT proc.ns, proc.id, proc.last_event_id - cardinality($11::text[]) + e.ord, $3::uuid,
           e.payload::jsonb, e.meta::jsonb
    FROM proc, unnest($11::text[], $12::text[]) WITH ORDINALITY AS e(payload, meta, ord)
    RETURNING event_id, payload, metadata
), feed AS (
    INSERT INTO dl_process_feed (ns, process_id, kind, event_id, task_id, payload, metadata)
    SELECT $1, $2, f.kind, f.event_id, $3::uuid, f.payload, f.metadata
    FROM (
        SELECT k.kind, NULL::bigint AS event_id, $22::text::jsonb AS payload, NULL::jsonb AS metadata,
               0 AS part, k.ord AS ord
        FROM proc, unnest($21::text[]) WITH ORDINALITY AS k(kind, ord)
        UNION ALL
        SELECT 'event', ev.event_id, ev.payload, ev.metadata, 1, ev.event_id
        FROM events ev
    ) f
    ORDER BY f.part, f.ord
), task AS (
    -- state_before: the process as this task found it, for a restart from this task (0016). Every
    -- part of one statement sees the rows as they were before it, so this reads the version the
    -- `proc` update replaces.
    UPDATE dl_process_tasks
    SET status = $14, response = $13::text::jsonb, error = $15, finished_at = now(),
        state_before = (
            SELECT jsonb_build_object(
                'status', b.status, 'detail', b.detail, 'corrupted_by', b.corrupted_by,
                'aux_state', b.aux_state, 'aux_state_bytes', encode(b.aux_state_bytes, 'base64'),
                'metadata', b.metadata, 'last_event_id', b.last_event_id,
                'timer_type', b.timer_type, 'timer_at', b.timer_at,
                'timer_armed', b.timer_task_id IS NOT NULL)
            FROM dl_processes b WHERE b.ns = $1 AND b.id = $2)
    WHERE task_id = $3::uuid AND EXISTS (SELECT 1 FROM proc)
), notified AS (
    -- the caller waiting on this task, and the feed's followers (one per namespace and commit:
    -- PostgreSQL folds identical notifications of a transaction)
    SELECT pg_notify('dl_process_task', $3::uuid::text), pg_notify('dl_process_feed', $1) FROM proc
)
SELECT (SELECT count(*) FROM proc) AS applied, (SELECT count(*) FROM notified) AS notified,
       (SELECT last_event_id FROM proc) AS last_event_id
