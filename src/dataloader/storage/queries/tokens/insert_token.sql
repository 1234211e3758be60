-- A new API token, expiring $5 seconds from now on the database's clock (the clock every node
-- checks expiry against). Nothing is inserted when a token that is not revoked has the name
-- (ux_dl_api_tokens_live_name): the caller answers api_token_exists.
-- $1 id, $2 name, $3 token_hash (SHA-256 of the secret), $4 scopes, $5 seconds until it expires,
-- $6 created_by (the principal's label)
INSERT INTO dl_api_tokens (id, name, token_hash, scopes, expires_at, created_by)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5), $6)
ON CONFLICT DO NOTHING
RETURNING
-- @include tokens/token_columns
;
