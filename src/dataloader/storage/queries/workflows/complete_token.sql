-- Complete a wait token once: the first completion of a run that has not ended stores its payload
-- as the run's signal `token:<seq>` (a wait_for on the token takes it) and marks the token used;
-- the caller then wakes the run in this transaction (wake.sql). The run's job row is locked first,
-- in the order send_signal.sql and dl_workflow_wake use. $1 token, $2 payload (JSON text).
-- Returns no row for an unknown token; else the run id, its job's status and the stored signal's id
-- (NULL: nothing stored — the run has ended, or the token was used, maybe a moment ago by a
-- completion this one waited for on the run's row).
WITH tok AS (
    SELECT t.token, t.run_id, t.seq FROM dl_workflow_tokens t WHERE t.token = $1
), run AS (
    -- by its primary key (a join let an empty table's generic plan walk the whole index)
    SELECT j.job_id, j.status FROM dl_jobs j WHERE j.job_id = (SELECT run_id FROM tok)
    FOR UPDATE OF j
), claimed AS (
    UPDATE dl_workflow_tokens t SET used_at = now()
    FROM run
    WHERE t.token = $1 AND t.used_at IS NULL AND run.status IN ('queued', 'running')
    RETURNING t.run_id, t.seq
), sig AS (
    INSERT INTO dl_workflow_signals (run_id, name, payload)
    SELECT run_id, 'token:' || seq, $2::text::jsonb FROM claimed
    RETURNING signal_id
)
SELECT tok.run_id, run.status::text AS status, (SELECT signal_id FROM sig) AS signal_id
FROM tok LEFT JOIN run ON true
