-- Release the migration lock taken by migration_lock.sql (bind parameter lock_id). Run through
-- SQLAlchemy text(), hence a named parameter.
SELECT pg_advisory_unlock(:lock_id);
