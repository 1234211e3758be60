-- Key rotation (docs/security.md "Encryption at rest"): the next $3 rows of dl_processes after key $1
-- (a JSON array of its primary key, ns, id; the smallest to start), in key order, each with its
-- key and, when its aux_state is a payload envelope under a key other than $2 (the current kid), that
-- aux_state as text to re-encrypt. Every examined row comes back (a NULL `v` when current) so the
-- caller resumes after the last: a batch walks the primary key, never the whole table.
SELECT jsonb_build_array(ns, id) AS k,
       CASE WHEN aux_state ?& array['$dl_enc', 'kid', 'ct'] AND aux_state->>'kid' IS DISTINCT FROM $2 THEN aux_state::text END AS v
FROM dl_processes
WHERE (ns, id) > ($1::jsonb->>0, $1::jsonb->>1)
ORDER BY ns, id
LIMIT $3
