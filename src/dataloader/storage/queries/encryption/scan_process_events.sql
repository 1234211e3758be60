-- Key rotation (docs/security.md "Encryption at rest"): the next $3 rows of dl_process_events after key $1
-- (a JSON array of its primary key, ns, process_id, event_id; the smallest to start), in key order, each with its
-- key and, when its payload is a payload envelope under a key other than $2 (the current kid), that
-- payload as text to re-encrypt. Every examined row comes back (a NULL `v` when current) so the
-- caller resumes after the last: a batch walks the primary key, never the whole table.
SELECT jsonb_build_array(ns, process_id, event_id) AS k,
       CASE WHEN payload ?& array['$dl_enc', 'kid', 'ct'] AND payload->>'kid' IS DISTINCT FROM $2 THEN payload::text END AS v
FROM dl_process_events
WHERE (ns, process_id, event_id) > ($1::jsonb->>0, $1::jsonb->>1, ($1::jsonb->>2)::bigint)
ORDER BY ns, process_id, event_id
LIMIT $3
