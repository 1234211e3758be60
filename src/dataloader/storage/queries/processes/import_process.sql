-- put: import a whole process (migration from another system) with its history, its feed rows
-- ('import', then one per event) and a NOTIFY for feed followers, in one statement. Nothing when
-- the id is taken (the caller reports it). $1 ns, $2 id, $3 status, $4 detail, $5 aux_state (JSON
-- text), $6 aux_state bytes, $7 metadata (JSON text), $8 event ids (bigint[]), $9 their
-- timestamps, $10 payloads (JSON text[]), $11 event metadata (JSON text[]), $12 timer task id,
-- $13 timer type, $14 timer due time.
WITH proc AS (
    INSERT INTO dl_processes (ns, id, status, detail, aux_state, aux_state_bytes, metadata, last_event_id,
                              timer_task_id, timer_type, timer_at)
    VALUES ($1, $2, $3, $4, $5::text::jsonb, $6::bytea, COALESCE($7::text::jsonb, '{}'::jsonb),
            COALESCE((SELECT max(i) FROM unnest($8::bigint[]) AS i), 0), $12, $13, $14)
    ON CONFLICT (ns, id) DO NOTHING
    RETURNING ns, id
), events AS (
    INSERT INTO dl_process_events (ns, process_id, event_id, ts, payload, metadata)
    SELECT proc.ns, proc.id, e.event_id, COALESCE(e.ts, now()), e.payload::jsonb, e.meta::jsonb
    FROM proc, unnest($8::bigint[], $9::timestamptz[], $10::text[], $11::text[]) AS e(event_id, ts, payload, meta)
    RETURNING event_id, payload, metadata
), feed AS (
    INSERT INTO dl_process_feed (ns, process_id, kind, event_id, payload, metadata)
    SELECT $1, $2, f.kind, f.event_id, f.payload, f.metadata
    FROM (
        SELECT 'import' AS kind, NULL::bigint AS event_id, jsonb_build_object('status', $3::text) AS payload,
               NULL::jsonb AS metadata, 0 AS part
        FROM proc
        UNION ALL
        SELECT 'event', ev.event_id, ev.payload, ev.metadata, 1 FROM events ev
    ) f
    ORDER BY f.part, f.event_id
), notified AS (
    SELECT pg_notify('dl_process_feed', $1) FROM proc
)
SELECT (SELECT count(*) FROM proc) AS imported, (SELECT count(*) FROM notified) AS notified
