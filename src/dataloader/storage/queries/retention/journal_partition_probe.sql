-- The statement that tells whether journal partition $1 holds no row (delete mode drops an emptied
-- partition past the horizon: retention/partitions.py drop_emptied), or NULL when $1 is not a
-- partition of dl_job_events. Its name is quoted by format(%I); the statement stops at the first
-- row it finds. Read from the catalog only.
SELECT format('SELECT NOT EXISTS (SELECT 1 FROM %I)', c.relname) AS probe
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass('dl_job_events') AND c.relname = $1::text
