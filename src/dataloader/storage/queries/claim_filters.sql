-- The plain claim's filters of its candidates (claim_jobs.sql, step_succeeded_claim.sql include
-- them in their `candidate` CTE's WHERE, before the running-key check): queued, of queue $1,
-- runnable now, not parked, the queue neither paused nor limited nor fair, the task not paused.
-- The including claim defines `fence AS MATERIALIZED (SELECT dl_claim_fence($1) AS paused_tasks)`.
    WHERE q.status = 'queued'
      AND q.queue = $1
      AND q.available_at <= now()
      AND NOT q.key_parked
      -- A queue with a limit (0022) starts nothing here: uncorrelated, so one probe of
      -- dl_queue_flow's primary key per claim (an InitPlan gating the walk), and an empty table when
      -- no queue has flow state. This claim cannot enforce a limit, so it leaves such a
      -- queue to claim_limited_jobs.sql (the worker learns the queue is limited from
      -- next_due_in.sql after this claim came back empty, and claims again with that one). So a
      -- limit set at run time holds from its commit on, as a pause does, and an unlimited queue's
      -- claim keeps this plan: the same probe, a longer filter on the row it found.
      -- Nor a fair queue (0024), left to claim_jobs_fair.sql the same way (its own order across
      -- partition keys, with the flow gate when it also has limits). Nor a queue with a limited
      -- task (0027: task_limited, on the same row, so no other probe).
      AND NOT EXISTS (SELECT 1 FROM dl_queue_flow f
                      WHERE f.queue = $1
                        AND (f.concurrency IS NOT NULL OR f.partition_concurrency IS NOT NULL
                             OR f.rate_limit IS NOT NULL OR f.partition_rate_limit IS NOT NULL OR f.fair_share
                             OR f.task_limited))
      -- A paused queue (dl_queue_flow, 0019; docs/flow-control.md) starts nothing: the claim fence
      -- (0029, the including claim's `fence` CTE: dl_claim_fence($1), called once, an InitPlan
      -- gating the walk) takes the queue's fence lock in share mode, then reads its pause in a
      -- fresh snapshot (NULL: paused), so a pause holds for every claim that starts after it
      -- committed, on every node, and waits for the claims in flight when it is written.
      AND EXISTS (SELECT 1 FROM fence WHERE fence.paused_tasks IS NOT NULL)
      -- A paused task of the queue (dl_task_flow, 0025) starts nothing: the fence's array of its
      -- paused tasks is uncorrelated (one probe of that table's primary key per claim; an empty
      -- table when no task was ever paused), and each candidate is compared with the array.
      -- `|| ''` hides task's statistics: in a queue of one task, `task <> <unknown array>` was
      -- estimated to keep no row, which costed the walk as reading the whole index (the plan flip
      -- claim_key_free.sql's lock_key term describes); the estimate is now the default's.
      AND q.task || '' <> ALL ((SELECT fence.paused_tasks FROM fence)::text[])
