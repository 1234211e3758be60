-- Key rotation (docs/security.md "Encryption at rest"): the next $3 rows of dl_process_feed after key $1
-- (a JSON array of its primary key, seq; the smallest to start), in key order, each with its
-- key and, when its payload is a payload envelope under a key other than $2 (the current kid), that
-- payload as text to re-encrypt. Every examined row comes back (a NULL `v` when current) so the
-- caller resumes after the last: a batch walks the primary key, never the whole table.
SELECT jsonb_build_array(seq) AS k,
       CASE WHEN payload ?& array['$dl_enc', 'kid', 'ct'] AND payload->>'kid' IS DISTINCT FROM $2 THEN payload::text END AS v
FROM dl_process_feed
WHERE seq > ($1::jsonb->>0)::bigint
ORDER BY seq
LIMIT $3
