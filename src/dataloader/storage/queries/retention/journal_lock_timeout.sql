-- How long the partition duty's DDL may wait for a lock ($1: a duration such as '500ms'), for the
-- rest of the caller's transaction only: the DDL gives up (and is retried at the next tick) rather
-- than hold a lock queue that every claim and finish would wait behind.
SELECT set_config('lock_timeout', $1::text, true)
