-- Lock the jobs of runs $1 (uuid[]) in the order given, before a bulk cancel changes them in one
-- transaction. The order is a run's deepest unfinished descendants first and the run last: the
-- order a child's end takes them (its own job, then, by the join's wake, its parent's), so a
-- child ending meanwhile waits for the cancel, or the cancel for it, and never both (no deadlock).
-- FOR UPDATE sits above the sort: rows are locked in ORDER BY's order. The ids as an index
-- condition (= ANY), so a generic plan reads dl_jobs by its primary key only.
SELECT j.job_id
FROM dl_jobs j
WHERE j.job_id = ANY ($1::uuid[])
ORDER BY array_position($1::uuid[], j.job_id)
FOR UPDATE OF j
