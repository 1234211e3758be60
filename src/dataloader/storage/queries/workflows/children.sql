-- How the children of a gather ended, in the gather's order. $1 child run ids (the gather's record).
SELECT c.run_id, j.status::text AS status, j.result::text AS result, j.error
FROM unnest($1::uuid[]) WITH ORDINALITY AS c(run_id, n)
LEFT JOIN dl_jobs j ON j.job_id = c.run_id
ORDER BY c.n
