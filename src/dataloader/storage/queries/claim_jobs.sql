-- Claim up to {limit} runnable jobs of queue $1 for worker $2, in one statement: take each job's
-- lock_key advisory lock on this connection (the queue's control connection, which holds the
-- locks of all its running jobs), and mark the jobs that got it running (attempt + 1, lease) with
-- their 'picked' journal rows.
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
WITH fence AS MATERIALIZED (
    -- the claim fence (0029; claim_filters.sql): taken once, before the walk
    SELECT dl_claim_fence($1) AS paused_tasks
), finishing AS (
    -- no attempt ends in this statement (claim_take.sql; step_succeeded_claim.sql names its own)
    SELECT NULL::uuid[] AS jobs, NULL::int[] AS attempts
), candidate AS (
    SELECT q.job_id, q.queue, q.task, q.lock_key, q.priority, q.available_at, q.created_at
    FROM dl_jobs q
-- @include claim_filters
-- @include claim_key_free
    ORDER BY q.priority ASC, q.available_at ASC, q.created_at ASC
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
),
-- @include claim_take
-- @include claim_answer
;
