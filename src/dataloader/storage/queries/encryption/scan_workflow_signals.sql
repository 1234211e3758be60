-- Key rotation (docs/security.md "Encryption at rest"): the next $3 rows of dl_workflow_signals after key $1
-- (a JSON array of its primary key, signal_id; the smallest to start), in key order, each with its
-- key and, when its payload is a payload envelope under a key other than $2 (the current kid), that
-- payload as text to re-encrypt. Every examined row comes back (a NULL `v` when current) so the
-- caller resumes after the last: a batch walks the primary key, never the whole table.
SELECT jsonb_build_array(signal_id) AS k,
       CASE WHEN payload ?& array['$dl_enc', 'kid', 'ct'] AND payload->>'kid' IS DISTINCT FROM $2 THEN payload::text END AS v
FROM dl_workflow_signals
WHERE signal_id > ($1::jsonb->>0)::bigint
ORDER BY signal_id
LIMIT $3
