-- Who a console cookie signs in, and whether signing in is needed at all: always one row.
-- `expires_at` is set when the session exists (not signed out), has not expired and is either a
-- DL_API_TOKEN session opened with the current token ($2; NULL when no token is set: no token
-- session signs in) or a user's session; `role` then is the user's role read NOW from dl_users
-- (NULL for a token session), and a disabled or deleted user's session reads as none. The role
-- is joined per request, not copied at sign-in, so a demotion or a disable holds from the next
-- request on every node. `users_exist`: once any user exists (disabled ones too), the console
-- asks everybody to sign in. Primary-key look-ups and an EXISTS on a table of a team's people.
-- $1 session_hash or NULL (no cookie), $2 token_mac or NULL
SELECT CASE WHEN s.user_name IS NULL OR u.name IS NOT NULL THEN s.expires_at END AS expires_at,
       u.name AS user_name, u.role, EXISTS (SELECT 1 FROM dl_users) AS users_exist
FROM (VALUES (1)) AS one (x)
LEFT JOIN dl_console_sessions s
    ON s.session_hash = $1 AND s.expires_at > now() AND (s.user_name IS NOT NULL OR s.token_mac = $2)
LEFT JOIN dl_users u ON u.name = s.user_name AND NOT u.disabled;
