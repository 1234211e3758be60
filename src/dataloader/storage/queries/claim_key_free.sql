-- The claim's running-key check (claim_jobs.sql, claim_limited_jobs.sql, claim_jobs_fair.sql
-- include it in their candidates' WHERE, on `dl_jobs q`): no job of the candidate's lock_key is
-- running. step_succeeded_claim.sql has its own copy that also leaves out the rows it finishes.
-- No parameters.
      -- `|| ''` hides lock_key's statistics from this estimate (same value, same plans available):
      -- with a hot key's 100,000 parked rows, the column's most common value is the running key,
      -- so PostgreSQL expected this to reject 99 % of the walk, costed the walk of
      -- ix_dl_jobs_claim_order as reading it all, and in about 1 ANALYZE of 5 preferred to read
      -- every unparked queued job out of the key index and sort them (2-4 ms instead
      -- of 0.02 ms; bench/hot_key.py's 2.8x and 3.8x runs). Parked rows are never candidates.
      AND NOT EXISTS (
          SELECT 1 FROM dl_jobs r
          -- Its status terms are said so that only ix_dl_jobs_key_live (0046: lock_key, then
          -- `COALESCE(status = 'running', false)`, predicate: `(status IN ('queued', 'running'))
          -- IS TRUE`) can serve the probe, by key and "is running": no index of the plain status
          -- column can take either term as its condition. Said as plain comparisons,
          -- ix_dl_jobs_running_lease (while another session held the xmin horizon: 504 buffers per
          -- probe instead of 3, bench/xmin_claim.py) and ix_dl_jobs_status_queue (after an ANALYZE
          -- of a drained queue: every entry of every job run since the last vacuum,
          -- bench/sustained.py) were walked instead, filtering by lock_key; with the running test
          -- as a filter (0045), a key with 100,000 queued jobs read all of them per probe
          -- (bench/hot_key.py's claim before parking: minutes). No ORDER BY: ordered by status, the
          -- probe would let ix_dl_jobs_status_queue (status first) serve it as an ordered walk of
          -- every row, which an empty analyzed table costs like the probe. OFFSET 0 keeps it a
          -- probe per candidate.
          WHERE r.lock_key = q.lock_key || '' AND (r.status IN ('queued', 'running')) IS TRUE
            AND COALESCE(r.status = 'running', false)
          OFFSET 0
      )
