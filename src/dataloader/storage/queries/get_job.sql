-- One job, every column, by its id ($1).
SELECT * FROM dl_jobs WHERE job_id = $1;
