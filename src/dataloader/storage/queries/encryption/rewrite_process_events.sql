-- Key rotation: store dl_process_events.payload re-encrypted under the current key, row by row, by primary key.
-- $1 the rows' keys (JSON arrays, as scan_process_events.sql gave them), $2 each one's payload as it was
-- read (text), $3 its new envelope (JSON text). Compare-and-set on the text read: a row written
-- since (a progress update, a retrigger) keeps its newer value, written under the current key by
-- the writer. Returns how many rows were rewritten.
WITH rewritten AS (
    UPDATE dl_process_events t SET payload = u.new::jsonb
    FROM unnest($1::jsonb[], $2::text[], $3::text[]) AS u(k, old, new)
    WHERE (t.ns, t.process_id, t.event_id) = (u.k->>0, u.k->>1, (u.k->>2)::bigint) AND t.payload::text = u.old
    RETURNING 1
)
SELECT count(*)::int FROM rewritten
