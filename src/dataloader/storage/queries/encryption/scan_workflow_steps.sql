-- Key rotation (docs/security.md "Encryption at rest"): the next $3 rows of dl_workflow_steps after key $1
-- (a JSON array of its primary key, run_id, seq; the smallest to start), in key order, each with its
-- key and, when its result is a payload envelope under a key other than $2 (the current kid), that
-- result as text to re-encrypt. Every examined row comes back (a NULL `v` when current) so the
-- caller resumes after the last: a batch walks the primary key, never the whole table.
SELECT jsonb_build_array(run_id, seq) AS k,
       CASE WHEN result ?& array['$dl_enc', 'kid', 'ct'] AND result->>'kid' IS DISTINCT FROM $2 THEN result::text END AS v
FROM dl_workflow_steps
WHERE (run_id, seq) > (($1::jsonb->>0)::uuid, ($1::jsonb->>1)::int)
ORDER BY run_id, seq
LIMIT $3
