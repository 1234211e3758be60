-- How many jobs match the operator's filter ($1..$12, as in search/jobs.sql), and $13: count at
-- most this many (NULL: all). A bulk operation's dry run and its `total`, and a search's count.
-- The cap keeps "how many?" on a table of millions a bounded read when the caller only needs to
-- know "more than N". Run with force_custom_plan, like search/jobs.sql.
SELECT count(*)::bigint AS jobs FROM (
    SELECT 1
    FROM dl_jobs
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
    LIMIT $13
) matched;
