-- The next batch of a bulk process operation: the ids matching its filter ($1..$5 as in
-- select_count.sql) after its keyset cursor $6 (the last id it examined; NULL at the start), in id
-- order (the primary key's), at most $7. The cursor moves past every id examined, so a process is
-- never handled twice, and processes created after the operation started are left alone.
SELECT id
-- @include processes/select_filter
  AND ($6::text IS NULL OR id > $6::text)
ORDER BY id
LIMIT $7
