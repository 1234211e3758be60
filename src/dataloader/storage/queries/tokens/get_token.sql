-- One token by id (revoked or not). $1 id.
SELECT
-- @include tokens/token_columns
FROM dl_api_tokens WHERE id = $1;
