-- The claim's taking part, after its `candidate` CTE (claim_jobs.sql, step_succeeded_claim.sql
-- include it where they say `-- @include claim_take`): of each lock_key's first candidate ask for
-- the key's advisory lock, mark the ones that got it running, and journal their 'picked' rows (with
-- the claiming session's backend pid: the session that holds the key, see running_picked_by.sql).
-- claim_jobs.sql's header says why each part has its shape. $1 queue (every candidate is of it),
-- $2 worker. The including statement defines `finishing` (jobs, attempts: the attempts it ends
-- itself, NULLs for none), which dl_take_keys leaves out of its running-key check. Defines ranked
-- (the candidates, key_rank), taken, locked, claimed, journal.
ranked AS (
    SELECT c.*, row_number() OVER (PARTITION BY c.lock_key
                                   ORDER BY c.priority, c.available_at, c.created_at) AS key_rank
    FROM candidate c
), taken AS MATERIALIZED (
    -- dl_take_keys (0047; 0044's dl_take_key for all the keys in one call): each first candidate's
    -- key lock, then the running-key check again in a snapshot taken after the locks (the walk's
    -- snapshot can predate a holder that committed and then lost its session)
    SELECT dl_take_keys(ARRAY(SELECT r.lock_key FROM ranked r WHERE r.key_rank = 1),
                        (SELECT f.jobs FROM finishing f), (SELECT f.attempts FROM finishing f)) AS keys
), locked AS MATERIALIZED (
    SELECT r.job_id
    FROM ranked r, taken t
    WHERE r.key_rank = 1 AND r.lock_key = ANY (t.keys)
), claimed AS (
-- @include claim_mark_running
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT c.job_id, $1::text, 'picked', jsonb_build_object('attempt', c.attempt, 'worker', $2::text, 'session', pg_backend_pid())
    FROM claimed c JOIN ranked r USING (job_id)
)
