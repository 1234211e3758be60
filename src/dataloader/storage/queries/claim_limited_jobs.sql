-- Claim up to {limit} runnable jobs of queue $1 for worker $2, for a queue with limits (0022;
-- docs/flow-control.md): claim_jobs.sql with the flow gate. The worker uses it while its queue has a
-- limit (claim_jobs.sql leaves a limited queue out; next_due_in.sql tells the worker); everything
-- claim_jobs.sql's header says about lock keys, parking and the order holds here too, and the two
-- must change together (tests/workers/test_claim_variants.py checks that, for a queue with no
-- limit, both claim the same jobs and answer the same). Each row says whether the queue was still limited (`limited`): false sends the
-- worker back to claim_jobs.sql.
--
-- Order: priority, then the time the job became runnable (available_at), then created_at. For a
-- job enqueued to run now available_at = created_at, so this is the spec's (priority, created_at)
-- order; a delayed job or a retry queues by its due time, as in Oban and River. It is what lets
-- ix_dl_jobs_claim_order serve the claim in O(log n) whatever the backlog (see migration 0004).
--
-- Lock keys, without wasted claims:
-- - jobs whose lock_key already has a running job are not candidates at all;
-- - of several candidates with one lock_key, only the first asks for the lock (key_rank = 1); the
--   others stay queued untouched (the CASE fixes the evaluation order, so a later one never takes
--   a second, re-entrant count of the lock);
-- - a candidate whose lock is taken (another node claims a job of that key at this very instant)
--   is not updated either: no attempt, no journal row, nothing to put back. Losing a race costs
--   nothing but a row lock held until this statement's transaction ends.
-- Every candidate comes back: claimed ones with their job, skipped ones with claimed = false and
-- asked_lock telling a lost lock (the caller checks who holds the key) from a duplicate key.
-- Advisory locks are re-entrant within a session: a key this connection already holds (a
-- fenced-off attempt of ours still winding down, or two keys with one hashtext) is granted again;
-- the caller detects that by lock_hash and gives the job back.
--
-- Parked jobs (0017) wait behind a running key outside ix_dl_jobs_claim_order, so the walk never
-- visits them; the finish that frees their key unparks its head. key_backlog tells the worker
-- that the key it just took has 16 or more unparked runnable waiters: it parks them from its control
-- connection (park_key_waiters.sql), since each would otherwise be walked and rejected by every
-- claim of this queue while the key runs. key_parked_behind tells it that the key's finish hands
-- the key over (parked jobs, or a backlog about to be parked), so it claims in the finish's step.
-- Both come from ONE probe per claimed job (the `key` lateral below: the key's queued rows of
-- ix_dl_jobs_key_live, unparked first, at most 16); on the common path (a key with no
-- other queued job) it finds only the claimed job itself.
--
-- {limit} is replaced by an integer, one prepared statement per batch size: with a parameter
-- ($3) PostgreSQL's reusable generic plan guesses the LIMIT and picks a sequential scan, so it
-- re-planned the claim on every call instead (about half of the claim's time).
--
-- Flow control (dl_queue_flow; docs/flow-control.md): the queue's row is read once, by primary key,
-- in this statement's snapshot (`flow`; no row: nothing paused, no limit, and nothing below runs).
-- A paused queue starts nothing. A queue with limits (0022) is gated by dl_flow_gate (0023), which
-- locks the row, so claims of a limited queue serialise on it across nodes, and counts running jobs
-- and starts in a fresh snapshot after the lock: its verdicts (one per candidate, NULL = may start)
-- decide which candidates ask for their lock. An unlimited queue never calls it. Before the walk,
-- from this statement's snapshot (cheap, may be a moment stale; the gate decides): a queue at its
-- limit walks nothing, and partition keys at theirs are skipped by the walk, so a hot partition's
-- backlog does not fill the batch with jobs that may not start.
-- Limits per task (0027): the row's task_limited makes the queue limited too; the gate then locks the
-- candidates' limited tasks' rows (dl_task_flow) and counts their running jobs and starts
-- (dl_task_starts), and tasks at their limit in this snapshot are passed over by the walk
-- (`full_tasks`), as partition keys are, so the queue's other tasks go on.
WITH fence AS MATERIALIZED (
    -- the claim fence (0029; claim_filters.sql): the queue's fence lock in share mode, then its
    -- pause in a fresh snapshot (NULL: paused) and its paused tasks; taken once, before the walk
    SELECT dl_claim_fence($1) AS paused_tasks
), flow AS MATERIALIZED (
    SELECT f.paused, f.fair_share,
-- @include claim_flow_limits
    FROM dl_queue_flow f
    WHERE f.queue = $1
), candidate AS (
    SELECT q.job_id, q.queue, q.task, q.lock_key, q.partition_key, q.priority, q.available_at, q.created_at
    FROM dl_jobs q
    WHERE q.status = 'queued'
      AND q.queue = $1
      AND q.available_at <= now()
      AND NOT q.key_parked
      -- A paused queue (0019), or one at its limit, starts nothing: uncorrelated, so one probe of
      -- the flow row per claim (an InitPlan gating the walk). Read in this statement's snapshot, so
      -- a pause holds for every claim that starts after it committed, on every node.
      AND NOT EXISTS (SELECT 1 FROM flow f WHERE f.paused OR f.full OR f.fair_share)
      AND q.partition_key <> ALL (COALESCE((SELECT f.full_partitions FROM flow f), '{}'::text[]))
      -- a fair queue (0024) is claimed by claim_jobs_fair.sql, which carries the same gate; a
      -- paused task (0025) starts nothing (claim_jobs.sql's term, `|| ''` and all)
      AND EXISTS (SELECT 1 FROM fence WHERE fence.paused_tasks IS NOT NULL)
      AND q.task || '' <> ALL ((SELECT fence.paused_tasks FROM fence)::text[])
      AND q.task || '' <> ALL (COALESCE((SELECT f.full_tasks FROM flow f), '{}'::text[]))
-- @include claim_key_free
    ORDER BY q.priority ASC, q.available_at ASC, q.created_at ASC
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
), ranked AS (
    SELECT c.*, row_number() OVER (PARTITION BY c.lock_key
                                   ORDER BY c.priority, c.available_at, c.created_at) AS key_rank,
           row_number() OVER (ORDER BY c.priority, c.available_at, c.created_at) AS pos
    FROM candidate c
),
-- @include claim_gate_take
)
-- @include claim_answer_job
       r.key_rank = 1 AND r.held IS NULL AS asked_lock,
       -- the limit that held this candidate back (dl_flow_gate; NULL: none did)
       r.held,
       COALESCE((SELECT f.frees_on_finish FROM flow f), false) AS frees_on_finish,
       COALESCE((SELECT f.limited FROM flow f), false) AS limited,
       -- dl_jobs' size now, for storage/plan_epoch.py: the worker's statements are prepared anew
       -- when the table has outgrown the size their cached plans were made for (one call per claim)
       (SELECT (pg_relation_size('dl_jobs'::regclass) / current_setting('block_size')::int)::int) AS table_pages
FROM verdict r LEFT JOIN claimed c USING (job_id)
-- @include claim_answer_backlog
ORDER BY r.priority, r.available_at, r.created_at;
