-- The queues that have finished jobs, by a loose scan of ix_dl_jobs_finished (migration 0009): one
-- index probe per queue instead of reading every finished row, so the pruner and the stats rollup
-- find their queues in O(queues × log n) on any table size. No parameters.
WITH RECURSIVE
-- @include finished_queues_walk
SELECT queue FROM queues WHERE queue IS NOT NULL;
