-- The next batch of a bulk workflow operation: the runs matching its filter ($1..$6 as in
-- select_filter.sql) after its keyset cursor ($7/$8: the (created_at, run_id) of the last run it
-- examined; NULL at the start), oldest first, at most $9. The cursor moves past every run examined,
-- changed or not, so a run that matches again later (restarted, failed again) is never handled a
-- second time by the same operation, and runs started after it began are left alone.
SELECT r.run_id, r.created_at
-- @include workflows/select_filter
  AND ($7::timestamptz IS NULL OR (r.created_at, r.run_id) > ($7::timestamptz, $8::uuid))
ORDER BY r.created_at, r.run_id
LIMIT $9
