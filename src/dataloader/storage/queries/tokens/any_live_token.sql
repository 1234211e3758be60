-- Whether any token is not revoked (expired ones count: a token running out never opens an API
-- that tokens closed). One probe of the partial index ux_dl_api_tokens_live_name.
SELECT EXISTS (SELECT 1 FROM dl_api_tokens WHERE revoked_at IS NULL);
