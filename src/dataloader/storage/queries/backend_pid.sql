-- The server process this statement ran on (no parameters). The pooling probe
-- (storage/session_probe.py) compares it across statements and connections: behind a
-- transaction-pooling PgBouncer two statements of one connection may land on different server
-- sessions, and two connections may share one; on a real session neither can happen.
SELECT pg_backend_pid();
