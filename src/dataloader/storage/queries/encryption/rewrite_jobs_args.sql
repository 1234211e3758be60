-- Key rotation: store dl_jobs.args re-encrypted under the current key, row by row, by primary key.
-- $1 the rows' keys (JSON arrays, as scan_jobs_args.sql gave them), $2 each one's args as it was
-- read (text), $3 its new envelope (JSON text). Compare-and-set on the text read: a row written
-- since (a progress update, a retrigger) keeps its newer value, written under the current key by
-- the writer. The keys are also an index condition of their own (= ANY of each key column), so
-- even a generic plan made on an empty table reaches the rows through the primary key.
-- Returns how many rows were rewritten.
WITH rewritten AS (
    UPDATE dl_jobs t SET args = u.new::jsonb
    FROM unnest($1::jsonb[], $2::text[], $3::text[]) AS u(k, old, new)
    WHERE t.job_id = ANY (ARRAY(SELECT (e->>0)::uuid FROM unnest($1::jsonb[]) AS e))
      AND t.job_id = (u.k->>0)::uuid AND t.args::text = u.old
    RETURNING 1
)
SELECT count(*)::int FROM rewritten
