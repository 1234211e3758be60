-- The settings of one bulk operation batch (its own transaction): custom plans, so the filter's
-- NULLs fold and its statuses pick their index (as search/custom_plans.sql); and a lock timeout,
-- so a batch never waits long behind a row some pipeline's transaction holds (the batch fails,
-- rolls back whole, and is tried again; nothing was applied, the cursor did not move).
SET LOCAL plan_cache_mode = force_custom_plan;
SET LOCAL lock_timeout = '5s';
-- A filter no index serves may read the table whole (sequential scans are off for the engine's
-- sessions: storage/db.py SESSION_SETTINGS); custom plans see the table's real size.
SET LOCAL enable_seqscan = on;
