-- How many processes a bulk process operation would examine: ProcessFilter's $1 ns, $2 statuses
-- (text[] or NULL), $3 ids (text[] or NULL), $4 detail ILIKE pattern (or NULL), created up to $5.
SELECT count(*)
-- @include processes/select_filter
