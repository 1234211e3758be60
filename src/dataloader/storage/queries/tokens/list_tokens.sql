-- Tokens, newest first; the revoked ones too when $1. A deployment has tens of tokens, not
-- thousands: $2 bounds the answer all the same.
-- $1 include revoked, $2 limit
SELECT
-- @include tokens/token_columns
FROM dl_api_tokens
WHERE $1 OR revoked_at IS NULL
ORDER BY created_at DESC, id
LIMIT $2;
