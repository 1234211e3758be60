-- The operator's filter, $1..$12 (named in search/jobs.sql's header; a NULL term matches
-- everything): the WHERE clause of search/jobs.sql, search/count.sql and operations/batch_ids.sql,
-- which include it right after their `FROM dl_jobs` (`-- @include search/filter`), so "the jobs
-- the search showed" and "the jobs the bulk operation touched" are one set. What follows the
-- include adds AND terms.
-- filter:begin
WHERE ($1::text[] IS NULL OR queue = ANY ($1::text[]))
  AND ($2::text[] IS NULL OR task = ANY ($2::text[]))
  -- one status as an equality (the CASE folds in a custom plan): the planner then takes it as a
  -- constant of the index order, where = ANY over a leading column (before PostgreSQL 17) leaves
  -- the scan unordered and adds a Sort of every match
  AND ($3::dl_status[] IS NULL OR CASE WHEN cardinality($3::dl_status[]) = 1 THEN status = ($3::dl_status[])[1]
                                       ELSE status = ANY ($3::dl_status[]) END)
  AND ($4::text IS NULL OR error ILIKE $4::text)
  AND ($5::timestamptz IS NULL OR created_at >= $5::timestamptz)
  AND ($6::timestamptz IS NULL OR created_at < $6::timestamptz)
  AND ($7::timestamptz IS NULL OR finished_at >= $7::timestamptz)
  AND ($8::timestamptz IS NULL OR finished_at < $8::timestamptz)
  AND ($9::jsonb IS NULL OR args @> $9::jsonb)
  AND ($10::text IS NULL OR args @? $10::text::jsonpath)
  AND ($11::text IS NULL OR starts_with(lock_key, $11::text))
  AND ($12::boolean IS NULL OR (held_at IS NOT NULL) = $12::boolean)
-- filter:end
