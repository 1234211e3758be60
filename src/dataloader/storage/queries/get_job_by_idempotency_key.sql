SELECT * FROM dl_jobs WHERE idempotency_key = $1;
