-- Probe of the LISTEN connection: a half-open TCP connection never reports its death, so the
-- listener sends this now and then and reconnects if it does not come back. No parameters.
SELECT 1;
