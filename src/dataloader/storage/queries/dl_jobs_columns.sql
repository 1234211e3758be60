-- The columns of dl_jobs in the current schema with their types (compared with the 003 DDL before
-- adopting a hand-applied schema). No parameters. Run through SQLAlchemy text().
SELECT column_name, data_type
FROM information_schema.columns
WHERE table_name = 'dl_jobs' AND table_schema = current_schema();
