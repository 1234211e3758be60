-- Make the server end the elector's session when the node stops talking to it (PostgreSQL >= 14).
-- The leader probes every DL_LEADER_RETRY_SEC and a follower retries as often, so a session that
-- stays idle much longer belongs to a node that is gone or cut off (a half-open connection the
-- server would otherwise keep for the TCP keepalive time, ~2 h by default): ending it releases the
-- leader lock, so a follower can take over. Session-local: the pool's connections are untouched.
-- $1 idle_session_timeout as text with unit, e.g. '15000ms'.
SELECT set_config('idle_session_timeout', $1::text, false);
