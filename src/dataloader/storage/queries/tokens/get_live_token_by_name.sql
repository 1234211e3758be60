-- The token of a name that is not revoked (at most one: ux_dl_api_tokens_live_name). $1 name.
SELECT
-- @include tokens/token_columns
FROM dl_api_tokens WHERE name = $1 AND revoked_at IS NULL;
