-- A console sign-in: a new session row, expiring $3 seconds from now on the database's clock (the
-- same for every node). In the same statement the browser's previous session (rotation: the cookie
-- it carried, $4, may be NULL) and every expired session are deleted, so the table holds only
-- sessions that may still sign someone in, without a duty of its own. A user's session ($6) keeps
-- no token MAC ($2 NULL); a DL_API_TOKEN session keeps no user ($6 NULL) (migration 0041).
-- $1 session_hash (SHA-256 of the cookie's secret), $2 token_mac or NULL, $3 ttl seconds, $4 previous
-- session_hash or NULL, $5 client address or NULL, $6 user name or NULL
WITH pruned AS (
    DELETE FROM dl_console_sessions
    WHERE expires_at <= now() OR session_hash = $4
    RETURNING 1
)
INSERT INTO dl_console_sessions (session_hash, token_mac, expires_at, client, user_name)
VALUES ($1, $2, now() + make_interval(secs => $3), $5, $6)
RETURNING expires_at, (SELECT count(*) FROM pruned)::int AS pruned;
