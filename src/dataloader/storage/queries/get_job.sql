SELECT * FROM dl_jobs WHERE job_id = $1;
