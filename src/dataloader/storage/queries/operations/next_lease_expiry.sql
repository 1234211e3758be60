-- Seconds (by the database clock) until the lease of a running operation runs out, the soonest
-- first (NULL: no running operation). A runner that found nothing to take sleeps until then, so
-- it takes over the operation of a dead runner as its lease ends without polling meanwhile; a
-- negative value is an expired lease whose row was locked by a batch in flight.
SELECT extract(epoch FROM min(lease_expires_at) - now())::float8
FROM dl_operations
WHERE state = 'running';
