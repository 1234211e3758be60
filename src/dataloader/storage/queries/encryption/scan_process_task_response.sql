-- Key rotation (docs/security.md "Encryption at rest"): the next $3 rows of dl_process_tasks after key $1
-- (a JSON array of its primary key, task_id; the smallest to start), in key order, each with its
-- key and, when its response is a payload envelope under a key other than $2 (the current kid), that
-- response as text to re-encrypt. Every examined row comes back (a NULL `v` when current) so the
-- caller resumes after the last: a batch walks the primary key, never the whole table.
SELECT jsonb_build_array(task_id) AS k,
       CASE WHEN response ?& array['$dl_enc', 'kid', 'ct'] AND response->>'kid' IS DISTINCT FROM $2 THEN response::text END AS v
FROM dl_process_tasks
WHERE task_id > ($1::jsonb->>0)::uuid
ORDER BY task_id
LIMIT $3
