-- The job an idempotency_key already names ($1), and whether its stored args equal $2 as PostgreSQL
-- compares jsonb: the stored form of a number may differ from what Python sends (1e300 comes back
-- as a 301-digit integer, -0.0 as 0), so comparing decoded Python objects would call a faithful
-- replay a conflict. $2 is JSON text, so any connection can run it (one without our jsonb codec).
SELECT *, args = $2::text::jsonb AS same_args FROM dl_jobs WHERE idempotency_key = $1;
