-- How the children of a gather ended, in the gather's order. $1 child run ids (the gather's record).
SELECT c.run_id, j.status::text AS status, j.result::text AS result, j.error
FROM unnest($1::uuid[]) WITH ORDINALITY AS c(run_id, n)
-- the ids as an index condition too: with the join alone a generic plan made on an empty table
-- merged with a walk of dl_jobs' whole primary key (tests/storage/test_plan_stability.py)
LEFT JOIN dl_jobs j ON j.job_id = c.run_id AND j.job_id = ANY ($1::uuid[])
ORDER BY c.n
