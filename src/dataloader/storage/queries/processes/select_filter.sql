-- The processes a bulk process operation examines (ProcessFilter.params): $1 ns, $2 statuses
-- (text[] or NULL), $3 ids (text[] or NULL), $4 detail ILIKE pattern (or NULL), created up to $5
-- (the operation's snapshot). The FROM and WHERE of select_count.sql and select_batch.sql, which
-- include it (`-- @include processes/select_filter`), so the count and the batches see one set.
FROM dl_processes
WHERE ns = $1
  AND ($2::text[] IS NULL OR status = ANY ($2::text[]))
  AND ($3::text[] IS NULL OR id = ANY ($3::text[]))
  AND ($4::text IS NULL OR detail ILIKE $4::text)
  AND created_at <= $5::timestamptz
