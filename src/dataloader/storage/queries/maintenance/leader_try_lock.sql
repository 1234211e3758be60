-- Try to become the maintenance leader: a session advisory lock on the elector's own connection,
-- held for as long as that session lives (so a node that dies, or whose connection the server
-- drops, stops leading without doing anything). The two-int form puts it in a lock space apart
-- from the engine's one-bigint lock_key locks (pg_locks.objsubid 2 vs 1), so no lock_key can
-- ever collide with it. Non-blocking: a follower asks again every DL_LEADER_RETRY_SEC.
-- $1 lock class (int4, a constant of the code), $2 lock id within the class (int4).
SELECT pg_try_advisory_lock($1::int4, $2::int4) AS acquired;
