-- Plan each statement of this transaction with its actual parameter values (custom plans), so
-- the NULL filters of search/*.sql and operations/batch_ids.sql fold away and the statuses they
-- name can pick a partial index: a cached generic plan must serve every combination and would
-- walk the whole table.
SET LOCAL plan_cache_mode = force_custom_plan;

-- The search may read dl_jobs whole (a filter no index serves): sequential scans, off for the
-- engine's sessions (storage/db.py SESSION_SETTINGS), are a plan it may choose again.
SET LOCAL enable_seqscan = on;
