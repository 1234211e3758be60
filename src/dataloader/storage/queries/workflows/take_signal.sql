-- Answer a pending wait, fenced like record_step.sql: the oldest unconsumed signal of its name is
-- consumed by this position (kept, with consumed_seq, for the history) and becomes the wait's
-- result; without one, a wait past its deadline ends as a timeout (error 'timeout', result NULL).
-- Otherwise nothing changes. One statement: the signal and the wait's end commit together, so a
-- signal answers exactly one wait.
-- $1 run id, $2 attempt, $3 seq, $4 signal name.
WITH live AS (
    SELECT job_id, queue FROM dl_jobs
    WHERE job_id = $1 AND status::text = 'running' AND attempt = $2
    FOR SHARE
), waiting AS (
    SELECT s.run_id, s.seq, s.wake_at FROM dl_workflow_steps s
    WHERE s.run_id = $1 AND s.seq = $3 AND s.kind = 'wait' AND s.state = 'pending' AND EXISTS (SELECT 1 FROM live)
    FOR UPDATE
), sig AS (
    SELECT g.signal_id FROM dl_workflow_signals g
    WHERE g.run_id = $1 AND g.name = $4 AND g.consumed_seq IS NULL AND EXISTS (SELECT 1 FROM waiting)
    ORDER BY g.signal_id
    LIMIT 1
    FOR UPDATE
), used AS (
    UPDATE dl_workflow_signals g SET consumed_seq = $3
    FROM sig WHERE g.signal_id = sig.signal_id
    RETURNING g.payload
), ended AS (
    UPDATE dl_workflow_steps s
    SET state = 'done', result = (SELECT payload FROM used),
        error = CASE WHEN EXISTS (SELECT 1 FROM used) THEN NULL ELSE 'timeout' END, finished_at = now()
    FROM waiting w
    WHERE s.run_id = w.run_id AND s.seq = w.seq
      AND (EXISTS (SELECT 1 FROM used) OR (w.wake_at IS NOT NULL AND w.wake_at <= now()))
    RETURNING s.seq, s.kind, s.name, s.state, s.result::text AS result, s.error, s.attempts, s.wake_at, s.remaining
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT live.job_id, live.queue, 'workflow_wait',
           jsonb_strip_nulls(jsonb_build_object('seq', ended.seq, 'name', ended.name, 'state', ended.state,
                                                'error', ended.error))
    FROM live, ended
)
SELECT EXISTS (SELECT 1 FROM live) AS live, ended.*
FROM (SELECT 1) AS one LEFT JOIN ended ON true
