-- Bulk delete of the jobs $1 (uuid[]): only finished rows (succeeded, failed, canceled, lost), so
-- no worker ever finds its running job gone; their journal rows go by ON DELETE CASCADE. What was
-- deleted stays countable in the operation's own row and audit trail. $2 operation id (unused
-- here but passed like every apply statement's).
WITH gone AS (
    DELETE FROM dl_jobs j
    WHERE j.job_id = ANY ($1::uuid[]) AND j.status IN ('succeeded', 'failed', 'canceled', 'lost')
      AND $2::uuid IS NOT NULL
    RETURNING 1
)
SELECT count(*)::bigint AS changed FROM gone;
