-- Which of the tables that tell a hand-applied 003 schema from an Alembic-managed one exist in the
-- current search path: one row, three booleans. No parameters. Run through SQLAlchemy text().
SELECT to_regclass('alembic_version') IS NOT NULL AS has_version_table,
       to_regclass('dl_jobs') IS NOT NULL AS has_jobs,
       to_regclass('dl_job_events') IS NOT NULL AS has_events;
