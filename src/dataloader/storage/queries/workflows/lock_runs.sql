-- Lock the jobs of runs $1 (uuid[]) in the order given, before a bulk cancel changes them in one
-- transaction. The order is a run's deepest unfinished descendants first and the run last: the
-- order a child's end takes them (its own job, then, by the join's wake, its parent's), so a
-- child ending meanwhile waits for the cancel, or the cancel for it, and never both (no deadlock).
-- FOR UPDATE sits above the sort: rows are locked in ORDER BY's order.
SELECT j.job_id
FROM unnest($1::uuid[]) WITH ORDINALITY AS u(run_id, n) JOIN dl_jobs j ON j.job_id = u.run_id
ORDER BY u.n
FOR UPDATE OF j
