-- A console sign-out: the session ends for every node at once (its row is gone), whatever copy of
-- the cookie is replayed later.
-- $1 session_hash
DELETE FROM dl_console_sessions WHERE session_hash = $1;
