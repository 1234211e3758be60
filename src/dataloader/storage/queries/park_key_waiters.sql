-- Park up to $3 runnable queued jobs waiting behind the lock_key of the running attempt ($1 job_id,
-- $2 attempt) of this connection (0017): they leave ix_dl_jobs_claim_order, so claims of the other
-- keys stop walking them. Only the key's holder parks, on its control connection, so the finish
-- that frees the key (same connection, later) sees every parked job and unparks the head
-- (dl_unpark_key_heads). Nothing is parked unless the attempt still runs with at least half its
-- lease left: the reaper takes a key back only after the lease expired, long after this statement
-- committed, so its own unpark sees these rows too. The holder row is read FOR SHARE, so a cancel
-- or a finish from another connection waits for this statement instead of crossing it.
-- Returns how many were parked (fewer than $3: the backlog is all parked).
WITH holder AS (
    SELECT h.lock_key
    FROM dl_jobs h
    WHERE h.job_id = $1 AND h.attempt = $2 AND h.status = 'running'
      AND h.lease_expires_at > now() + make_interval(secs => h.lease_ttl_sec / 2.0)
    FOR SHARE
), parked AS (
    UPDATE dl_jobs j
    SET key_parked = true
    WHERE j.job_id = ANY (ARRAY(
        SELECT w.job_id
        FROM dl_jobs w, holder
        WHERE w.lock_key = holder.lock_key AND (w.status IN ('queued', 'running')) IS TRUE AND NOT COALESCE(w.status = 'running', false)
          AND NOT w.key_parked
          AND w.available_at <= now()
        LIMIT $3
        FOR UPDATE OF w SKIP LOCKED))
    RETURNING 1
)
SELECT count(*)::int AS parked FROM parked;
