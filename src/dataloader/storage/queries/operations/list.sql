-- Operations newest first, optionally only states $1 (text[]), after the (created_at,
-- operation_id) cursor $2/$3, at most $4.
SELECT * FROM dl_operations
WHERE ($1::text[] IS NULL OR state = ANY ($1::text[]))
  AND ($2::timestamptz IS NULL OR (created_at, operation_id) < ($2::timestamptz, $3::uuid))
ORDER BY created_at DESC, operation_id DESC
LIMIT $4;
