-- The claim's running-key check (claim_jobs.sql, claim_limited_jobs.sql, claim_jobs_fair.sql
-- include it in their candidates' WHERE, on `dl_jobs q`): no job of the candidate's lock_key is
-- running. step_succeeded_claim.sql has its own copy that also leaves out the rows it finishes.
-- No parameters.
      -- `|| ''` hides lock_key's statistics from this estimate (same value, same plans available):
      -- with a hot key's 100,000 parked rows, the column's most common value is the running key,
      -- so PostgreSQL expected this to reject 99 % of the walk, costed the walk of
      -- ix_dl_jobs_claim_order as reading it all, and in about 1 ANALYZE of 5 preferred to read
      -- every unparked queued job out of ix_dl_jobs_lock_key_active and sort them (2-4 ms instead
      -- of 0.02 ms; bench/hot_key.py's 2.8x and 3.8x runs). Parked rows are never candidates.
      AND NOT EXISTS (
          SELECT 1 FROM dl_jobs r
          -- `status > 'queued'` within ('queued', 'running') is 'running' (the enum's order), said
          -- so that only ix_dl_jobs_lock_key_active (predicate: those two) can serve the probe, not
          -- ix_dl_jobs_running_lease (predicate status = 'running'). While another session holds
          -- the xmin horizon, a VACUUM counts that index's entries as 0 live rows though it still
          -- holds one per job run since (none removable); planned as a full scan of it (estimated
          -- cheaper by a hair), each candidate's probe read all of them: 504 buffers instead of 3
          -- after 10,000 jobs (bench/xmin_claim.py; docs/scaling.md "A held xmin horizon").
          WHERE r.lock_key = q.lock_key || '' AND r.status IN ('queued', 'running') AND r.status > 'queued'
          ORDER BY r.lock_key, r.status OFFSET 0
      )
