-- Whether a console cookie signs its browser in: its session exists (not signed out), was opened
-- with the current DL_API_TOKEN and has not expired. One primary-key look-up per console request,
-- on every node alike: a sign-out on one node is seen by the next request on any other.
-- $1 session_hash, $2 token_mac
SELECT expires_at
FROM dl_console_sessions
WHERE session_hash = $1 AND token_mac = $2 AND expires_at > now();
