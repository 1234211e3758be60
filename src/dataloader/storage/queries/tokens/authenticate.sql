-- The guard's look-up of a bearer token, one round trip: the token whose secret hashes to $1 if
-- it is neither revoked nor expired (on the database's clock), with the seconds it has left so the
-- node caches it no longer than that. In the same statement `last_used_at` is moved to now, but
-- only when it is older than $2 seconds: a busy token costs one write per $2, not one per request
-- (and one per node's cache period at most, since only a cache miss runs this).
-- $1 token_hash, $2 seconds last_used_at may lag behind
WITH hit AS (
    SELECT id, name, scopes, last_used_at, expires_at
    FROM dl_api_tokens
    WHERE token_hash = $1 AND revoked_at IS NULL AND expires_at > now()
), touched AS (
    UPDATE dl_api_tokens t SET last_used_at = now()
    FROM hit
    WHERE t.id = hit.id AND (hit.last_used_at IS NULL OR hit.last_used_at <= now() - make_interval(secs => $2))
    RETURNING t.id
)
SELECT id, name, scopes, extract(epoch FROM expires_at - now())::float8 AS remaining_sec
FROM hit;
