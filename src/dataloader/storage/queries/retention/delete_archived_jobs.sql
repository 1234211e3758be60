-- Delete the jobs $1 (uuid[]) that archive_batch_jobs.sql locked and that were exported; their
-- journal goes with them (ON DELETE CASCADE). No re-check: the caller's transaction holds their
-- row locks since the read, so nothing changed them. Returns how many jobs were deleted.
WITH gone AS (
    DELETE FROM dl_jobs WHERE job_id = ANY ($1::uuid[]) RETURNING 1
)
SELECT count(*)::bigint AS deleted FROM gone;
