-- Serialize migrations across replicas starting together (bind parameter lock_id: MIGRATION_LOCK_ID).
-- A session lock, so it outlives the commits Alembic makes while it is held. Run through
-- SQLAlchemy text(), hence a named parameter.
SELECT pg_advisory_lock(:lock_id);
