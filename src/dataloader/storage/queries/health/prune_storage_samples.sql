-- Drop the storage samples older than $1 seconds (DL_STORAGE_SAMPLE_KEEP), by the sampler after
-- each sample: a range from the head of the key, a few dozen rows per period. Returns how many.
-- $1 keep: seconds of samples kept
WITH gone AS (
    DELETE FROM dl_storage_samples WHERE sampled_at < now() - make_interval(secs => $1::float8) RETURNING 1
)
SELECT count(*)::bigint AS deleted FROM gone;
