-- Take back running jobs whose lease ran out: queued again, or lost when no attempt is left.
-- SKIP LOCKED makes concurrent reapers on several replicas split the work instead of repeating it.
-- A running row without a lease (never written by the engine, but the table is shared and the schema
-- allows it) would otherwise stay running forever: it is reaped once a lease's time has passed
-- since its last sign of life. $1 batch size. $2, $3: jobs (ids and attempts) whose worker was found
-- dead on its machine (jobs/reaper.py): taken back now, before their leases run out; the attempt is
-- the fence, so a job another worker claimed meanwhile is left alone. Empty arrays: none.
-- The keys it frees get their parked heads unparked (0017, dl_unpark_key_heads), and so does any
-- key with parked jobs and nothing running (the sweep: a key a crash or a bulk cancel left fully
-- parked waits at most one reaper period). Hence one row with a NULL job_id when nothing was
-- reaped: the sweep must run every time, and a SELECT-only CTE runs only when read.
WITH RECURSIVE expired AS (
    SELECT job_id
    FROM dl_jobs
    WHERE status = 'running'
      AND (lease_expires_at < now()
           OR (lease_expires_at IS NULL
               AND COALESCE(heartbeat_at, started_at, '-infinity') < now() - make_interval(secs => lease_ttl_sec))
           OR (job_id, attempt) IN (SELECT * FROM unnest($2::uuid[], $3::int[])))
    ORDER BY lease_expires_at NULLS FIRST
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE dl_jobs j
    SET status = CASE WHEN j.cancel_requested THEN 'canceled'
                      WHEN j.attempt - j.attempts_before_retry < j.max_attempts THEN 'queued'
                      ELSE 'lost' END::dl_status,
        available_at = now(),
        lease_expires_at = NULL,
        error = CASE WHEN j.lease_expires_at < now() OR j.lease_expires_at IS NULL
                     THEN 'lease expired: the worker stopped heartbeating (attempt ' || j.attempt || ')'
                     ELSE 'its worker died: taken back by a node on the same machine (attempt ' || j.attempt || ')'
                END,
        finished_at = CASE WHEN j.attempt - j.attempts_before_retry < j.max_attempts AND NOT j.cancel_requested
                           THEN NULL ELSE now() END
    WHERE j.job_id = ANY (ARRAY(SELECT e.job_id FROM expired e))
    RETURNING j.job_id, j.queue, j.task, j.status, j.attempt, j.lock_key,
              CASE WHEN starts_with(j.error, 'its worker died') THEN 'worker_died' ELSE 'lease_expired' END AS reason
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue,
           CASE WHEN status = 'queued' THEN 'requeue' ELSE status::text END,
           jsonb_build_object('attempt', attempt, 'reason', reason)
    FROM reaped
), lost_process_tasks AS (
    -- A process task (docs/processes.md) whose last attempt's node died ends in error, and its
    -- process with it (corrupted_by = the task, as when a timer's retries run out), in this same
    -- statement: a process never keeps running with a task that will never end.
    UPDATE dl_process_tasks t
    SET status = 'error', finished_at = now(),
        error = 'lost: its lease expired on its last attempt (' || r.attempt || ')'
    FROM reaped r
    WHERE t.task_id = ANY (ARRAY(SELECT job_id FROM reaped WHERE status = 'lost'))
      AND r.status = 'lost' AND t.task_id = r.job_id AND t.status = 'waiting'
    RETURNING t.task_id, t.ns, t.process_id, t.task_type, t.error
), broken_processes AS (
    UPDATE dl_processes p
    SET previous_status = p.status, status = 'error', status_changed_at = now(), corrupted_by = l.task_id,
        detail = 'task ' || l.task_type || ' ' || l.error, version = p.version + 1, updated_at = now()
    FROM lost_process_tasks l
    WHERE p.ns = ANY (ARRAY(SELECT ns FROM lost_process_tasks)) AND p.id = ANY (ARRAY(SELECT process_id FROM lost_process_tasks))
      AND p.ns = l.ns AND p.id = l.process_id AND p.status <> 'error'
    RETURNING p.ns, p.id, l.task_id, l.task_type
), process_feed AS (
    INSERT INTO dl_process_feed (ns, process_id, kind, task_id, payload)
    SELECT ns, id, 'error', task_id, jsonb_build_object('reason', 'task_lost', 'task_type', task_type)
    FROM broken_processes
), process_notified AS (
    SELECT pg_notify('dl_process_task', l.task_id::text), pg_notify('dl_process_feed', l.ns)
    FROM lost_process_tasks l
), parked_key AS (
    -- every key with parked jobs once (a loose scan of ix_dl_jobs_key_parked, empty unless a key is hot)
    SELECT (SELECT min(p.lock_key) FROM dl_jobs p WHERE p.status = 'queued' AND p.key_parked) AS lock_key
    UNION ALL
    SELECT (SELECT min(p.lock_key) FROM dl_jobs p
            WHERE p.status = 'queued' AND p.key_parked AND p.lock_key > k.lock_key)
    FROM parked_key k
    WHERE k.lock_key IS NOT NULL
), stranded AS (
    SELECT k.lock_key
    FROM parked_key k
    WHERE k.lock_key IS NOT NULL
      AND (SELECT 1 FROM dl_jobs r WHERE r.lock_key = k.lock_key
                             AND (r.status IN ('queued', 'running')) IS TRUE AND COALESCE(r.status = 'running', false) LIMIT 1) IS NULL
), unparked AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM stranded)
                  OR EXISTS (SELECT 1 FROM reaped r CROSS JOIN LATERAL (
                                 SELECT 1 FROM dl_jobs p
                                 WHERE p.lock_key = r.lock_key AND (p.status IN ('queued', 'running')) IS TRUE AND NOT COALESCE(p.status = 'running', false)
                                   AND p.key_parked LIMIT 1) p)
                THEN dl_unpark_key_heads(ARRAY(SELECT lock_key FROM reaped UNION SELECT lock_key FROM stranded))
                ELSE 0 END AS woken
)
SELECT r.job_id, r.queue, r.task, r.status::text AS status, r.attempt, r.reason,
       (SELECT count(*) FROM process_notified) AS processes_broken, u.woken AS keys_unparked
FROM unparked u LEFT JOIN reaped r ON true;
