-- The leader's periodic probe: proves in one round trip that its session is alive AND still holds
-- the leader lock (a "SELECT 1" would prove only the first). Run with a client-side timeout, so a
-- half-open TCP connection cannot keep a dead link "leading". pg_locks stores the two-int key as
-- classid/objid with objsubid = 2.
-- $1 lock class (int4), $2 lock id (int4).
SELECT EXISTS (
    SELECT 1
    FROM pg_locks
    WHERE locktype = 'advisory'
      AND classid = ($1::int4)::oid
      AND objid = ($2::int4)::oid
      AND objsubid = 2
      AND pid = pg_backend_pid()
      AND granted
) AS held;
