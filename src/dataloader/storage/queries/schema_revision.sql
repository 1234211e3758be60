-- The Alembic revision the database is at (readiness check); one row, or none before migrating.
SELECT version_num FROM alembic_version LIMIT 1;
