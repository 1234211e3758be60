-- Seconds (by the database clock) until the lease of a running operation runs out, the soonest
-- first (NULL: no running operation). A runner that found nothing to take sleeps until then, so
-- it takes over the operation of a dead runner as its lease ends without polling meanwhile; a
-- negative value is an expired lease whose row was locked by a batch in flight.
-- Clamped to a day either side (CASE, not GREATEST, which would turn NULL into a bound): a
-- hand-written +-infinity lease cannot be subtracted.
SELECT extract(epoch FROM CASE WHEN m < now() - interval '1 day' THEN now() - interval '1 day'
                               WHEN m > now() + interval '1 day' THEN now() + interval '1 day'
                               ELSE m END - now())::float8
FROM (SELECT min(lease_expires_at) AS m FROM dl_operations WHERE state = 'running') soonest;
