-- Revoke a token: from now on every node that looks it up refuses it (a node that cached it sees
-- the revocation within model.api_token.LOOKUP_CACHE_SEC). Revoking again keeps the first time.
-- $1 id
UPDATE dl_api_tokens SET revoked_at = coalesce(revoked_at, now())
WHERE id = $1
RETURNING
-- @include tokens/token_columns
;
