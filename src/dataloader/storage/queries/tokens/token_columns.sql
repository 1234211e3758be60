-- The columns of a token every reader returns (model.api_token.ApiToken): never its hash.
id, name, scopes, created_at, expires_at, revoked_at, last_used_at, created_by
