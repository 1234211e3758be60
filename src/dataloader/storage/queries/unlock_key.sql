-- Give back one count of a lock_key's advisory lock held by this session ($1 lock_key).
SELECT pg_advisory_unlock(hashtext($1));
