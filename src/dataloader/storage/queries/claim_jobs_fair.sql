-- The claim of a FAIR queue (dl_queue_flow.fair_share, 0024; docs/flow-control.md "Fair share"):
-- claim_jobs.sql (claim_limited_jobs.sql when the queue has limits) with another order. Up to
-- {limit} runnable jobs of queue $1 for worker $2, taken
-- round-robin (or by weight) across the queue's partition keys instead of strictly by age, so one
-- tenant's backlog does not hold back the first job of every other. Every other rule is the
-- default claim's, written the same way: pause (of the queue and of a task), the queue's limits
-- (0022/0023: the same reading of its row, partition keys at their limit passed over, the same
-- dl_flow_gate verdicts on the candidates in this claim's order), lock_key (no candidate whose key runs, one lock
-- request per key, pg_try_advisory_lock on this connection), parked jobs, the attempt and lease,
-- the 'picked' journal rows, and the same result columns (queue_connection.py reads both alike).
--
-- Order: a tenant's jobs by (priority, available_at, created_at), as the default claim orders a
-- queue; across tenants by share = (the job's rank in its tenant) / (the tenant's weight), then
-- the tenant that was served least recently first (dl_queue_partitions.served_at; never served
-- first), then age. With equal weights a batch takes one job of each tenant before a second of
-- any (round-robin), and the tenants this claim served are stamped, so the next claim on any node
-- starts with the others.
--
-- Shape, and why:
-- - `tenant`: a skip scan of ix_dl_jobs_fair over the queue's distinct partition keys (one index
--   descent per tenant, whatever each tenant's backlog): 100,000 jobs of one tenant cost one
--   descent, 1,000 tenants cost 1,000.
-- - `head`: the tenants' first runnable jobs from the same index, least recently served tenant
--   first, at most the tenant's weighted share of 4 * {limit} (rounded up) and 4 * {limit} in all: enough that a batch can take each tenant's share, and that three more
--   claims racing this one (SKIP LOCKED) still find jobs; read lazily, so a claim reads the heads
--   of about 4 * {limit} tenants whatever their number.
-- - `pick` orders them (also what tells the planner to fetch them by primary key); `candidate` locks the first {limit} with FOR UPDATE SKIP LOCKED (a row a
--   racing claim holds is skipped; one it has claimed since our snapshot fails status = 'queued'
--   on re-check). FOR UPDATE may not sit on a query with window functions, hence two steps.
-- - The gate: the `flow` row must say fair and not paused; otherwise no tenant is read and the
--   claim is empty, and the worker asks next_due_in.sql which claim the queue wants now.
-- - A weight comes from fair_weights (partition_key -> number); anything but a number in
--   [0.001, 1e6] reads as 1, so no hand-written value can make the claim fail (1e-320 did: a
--   tenant's rank divided by it overflowed).
-- - The served stamp is this claim's time plus the tenant's first place in its order (in µs), so
--   the tenants of one claim keep their turn in the next (a tie would hand it to the oldest
--   heads again, and the last tenants of a round would wait behind the first ones forever). It
--   upserts in partition_key order, so two claims stamping the same tenants
--   lock their rows in one order (no deadlock); a racing claim waits for the other's commit only
--   when both served a tenant.
--
-- {limit} is replaced by an integer, as in claim_jobs.sql (one prepared statement per batch size).
WITH RECURSIVE fence AS MATERIALIZED (
    -- the claim fence (0029; claim_filters.sql): the queue's fence lock in share mode, then its
    -- pause in a fresh snapshot (NULL: paused) and its paused tasks; taken once, before the walk
    SELECT dl_claim_fence($1) AS paused_tasks
), flow AS MATERIALIZED (
    -- the queue's row, for a fair queue that is not paused: its weights and the limit columns
    -- claim_limited_jobs.sql reads the same way
    SELECT f.fair_weights AS weights,
-- @include claim_flow_limits
    FROM dl_queue_flow f
    WHERE f.queue = $1 AND f.fair_share AND NOT f.paused AND EXISTS (SELECT 1 FROM fence WHERE fence.paused_tasks IS NOT NULL)
), paused_task AS (
    -- the queue's paused tasks (0025), read once: claim_jobs.sql's rule
    -- and its limited tasks at their limit (0027), passed over the same way
    SELECT (SELECT fence.paused_tasks FROM fence)
           || COALESCE((SELECT fl.full_tasks FROM flow fl), '{}'::text[]) AS tasks
    -- (compared with `task || ''`, as in claim_jobs.sql: a queue of one task had its walk costed
    -- as a read of every row, and a tenant's head was read by a bitmap scan and a sort)
), tenant AS (
    (SELECT q.partition_key FROM dl_jobs q
     WHERE q.status = 'queued' AND NOT q.key_parked AND q.queue = $1 AND EXISTS (SELECT 1 FROM flow fl WHERE NOT fl.full)
     ORDER BY q.partition_key LIMIT 1)
    UNION ALL
    SELECT (SELECT q.partition_key FROM dl_jobs q
            WHERE q.status = 'queued' AND NOT q.key_parked AND q.queue = $1 AND q.partition_key > t.partition_key
            ORDER BY q.partition_key LIMIT 1)
    FROM tenant t
    WHERE t.partition_key IS NOT NULL
), weighed AS (
    SELECT t.partition_key,
           CASE WHEN jsonb_typeof(fl.weights -> t.partition_key) = 'number'
                     -- model/flow.py's WEIGHT_MIN and WEIGHT_MAX: the shares stay finite
                     AND (fl.weights ->> t.partition_key)::numeric >= 0.001
                     AND (fl.weights ->> t.partition_key)::numeric <= 1000000
                THEN (fl.weights ->> t.partition_key)::float8 ELSE 1.0 END AS weight
    FROM tenant t CROSS JOIN flow fl
    -- a partition key at its own limit is passed over (the gate below decides; this only keeps its
    -- backlog out of the batch)
    WHERE t.partition_key IS NOT NULL AND t.partition_key <> ALL (COALESCE(fl.full_partitions, '{}'::text[]))
), weighted AS (
    SELECT w.partition_key, w.weight, sum(w.weight) OVER () AS total_weight FROM weighed w
), ordered AS MATERIALIZED (
    -- the tenants, least recently served first (never served first): the order heads are read in
    SELECT w.partition_key, w.weight, w.total_weight, s.served_at
    FROM weighted w
    LEFT JOIN dl_queue_partitions s ON s.queue = $1 AND s.partition_key = w.partition_key
    ORDER BY s.served_at NULLS FIRST, w.partition_key
), head AS (
    -- heads are read tenant by tenant in that order, and only until 4 * {limit} are found (the
    -- LIMIT pulls the nested loop lazily): with 1,000 tenants a claim reads the heads of about 64,
    -- not 1,000, and a tenant with nothing runnable (all delayed, or its keys running) is passed over
    SELECT h.job_id, h.priority, h.available_at, h.created_at, o.partition_key, o.served_at, o.weight
    FROM ordered o
    CROSS JOIN LATERAL (
        -- the inner LIMIT is a constant so every plan (a generic one too) walks ix_dl_jobs_fair in
        -- order and stops; the outer one, the tenant's cap, stops it sooner (Limit pulls lazily)
        SELECT x.* FROM (
            SELECT q.job_id, q.priority, q.available_at, q.created_at
            FROM dl_jobs q
            WHERE q.status = 'queued' AND NOT q.key_parked AND q.queue = $1 AND q.partition_key = o.partition_key
              AND q.available_at <= now()
              AND q.task || '' <> ALL ((SELECT pt.tasks FROM paused_task pt)::text[])
-- @include claim_key_free
            ORDER BY q.priority, q.available_at, q.created_at
            LIMIT 4 * {limit}
        ) x
        LIMIT LEAST(4 * {limit}, ceil(4.0 * {limit} * o.weight / o.total_weight))::int
    ) h
    LIMIT 4 * {limit}
), pick AS MATERIALIZED (
    SELECT sh.job_id,
           row_number() OVER (ORDER BY sh.share, sh.served_at NULLS FIRST, sh.available_at, sh.created_at,
                                       sh.partition_key) AS ord
    FROM (SELECT hd.*, row_number() OVER (PARTITION BY hd.partition_key
                                          ORDER BY hd.priority, hd.available_at, hd.created_at) / hd.weight AS share
          FROM head hd) sh
    ORDER BY ord
    LIMIT 4 * {limit}
), candidate AS (
    SELECT q.job_id, q.queue, q.task, q.lock_key, q.priority, q.available_at, q.created_at, q.partition_key,
           p.ord
    FROM pick p JOIN dl_jobs q ON q.job_id = p.job_id
    -- the picked ids as an index condition too: without it a generic plan made on an empty table
    -- hashed dl_jobs whole (an Index Scan of dl_jobs_pkey with only a Filter) to join the picks
    WHERE q.job_id = ANY (ARRAY(SELECT pk.job_id FROM pick pk))
      AND q.status = 'queued' AND NOT q.key_parked
    ORDER BY p.ord
    LIMIT {limit}
    FOR UPDATE OF q SKIP LOCKED
), ranked AS (
    SELECT c.*, row_number() OVER (PARTITION BY c.lock_key ORDER BY c.ord) AS key_rank,
           row_number() OVER (ORDER BY c.ord) AS pos
    FROM candidate c
),
-- @include claim_gate_take
), served AS (
    INSERT INTO dl_queue_partitions AS s (queue, partition_key, served_at)
    SELECT $1, d.partition_key, (SELECT clock_timestamp()) + d.ord * interval '1 microsecond'
    FROM (SELECT c.partition_key, min(r.ord) AS ord FROM claimed c JOIN verdict r USING (job_id)
          GROUP BY c.partition_key) d
    ORDER BY d.partition_key
    ON CONFLICT (queue, partition_key) DO UPDATE SET served_at = excluded.served_at
)
-- @include claim_answer_job
       r.key_rank = 1 AND r.held IS NULL AS asked_lock,
       r.held,
       COALESCE((SELECT f.frees_on_finish FROM flow f), false) AS frees_on_finish,
       (SELECT (pg_relation_size('dl_jobs'::regclass) / current_setting('block_size')::int)::int) AS table_pages
FROM verdict r LEFT JOIN claimed c USING (job_id)
-- @include claim_answer_backlog
ORDER BY r.ord;
