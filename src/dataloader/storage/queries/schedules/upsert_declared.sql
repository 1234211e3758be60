-- Upsert a schedule declared in code (`@schedule`, source 'code'), as every scheduler does at start.
-- A new name is inserted; a code-declared one whose definition changed is updated (its next tick is
-- recomputed only when the timing itself changed, and a pause set by an operator is kept); a name
-- created through the API is left alone (the caller logs it). Returns a row only when something was
-- written; `inserted` tells which. Same parameters as insert_schedule.sql ($15 paused is used only
-- for a new row).
WITH upserted AS (
    INSERT INTO dl_schedules AS s (name, task, queue, args, cron, every_ms, timezone, missed, catch_up_limit,
                                   grace_sec, lock_key, priority, max_attempts, lease_ttl_sec, paused, source,
                                   next_run_at)
    VALUES ($1, $2, $3, $4::text::jsonb, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 'code', $16)
    ON CONFLICT (name) DO UPDATE
    SET task = EXCLUDED.task, queue = EXCLUDED.queue, args = EXCLUDED.args, cron = EXCLUDED.cron,
        every_ms = EXCLUDED.every_ms, timezone = EXCLUDED.timezone, missed = EXCLUDED.missed,
        catch_up_limit = EXCLUDED.catch_up_limit, grace_sec = EXCLUDED.grace_sec, lock_key = EXCLUDED.lock_key,
        priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts, lease_ttl_sec = EXCLUDED.lease_ttl_sec,
        next_run_at = CASE
            WHEN (s.cron, s.every_ms, s.timezone) IS DISTINCT FROM (EXCLUDED.cron, EXCLUDED.every_ms, EXCLUDED.timezone)
            THEN EXCLUDED.next_run_at ELSE s.next_run_at END,
        revision = s.revision + 1,
        updated_at = now()
    WHERE s.source = 'code'
      AND (s.task, s.queue, s.args, s.cron, s.every_ms, s.timezone, s.missed, s.catch_up_limit, s.grace_sec,
           s.lock_key, s.priority, s.max_attempts, s.lease_ttl_sec)
          IS DISTINCT FROM
          (EXCLUDED.task, EXCLUDED.queue, EXCLUDED.args, EXCLUDED.cron, EXCLUDED.every_ms, EXCLUDED.timezone,
           EXCLUDED.missed, EXCLUDED.catch_up_limit, EXCLUDED.grace_sec, EXCLUDED.lock_key, EXCLUDED.priority,
           EXCLUDED.max_attempts, EXCLUDED.lease_ttl_sec)
    RETURNING s.name, (s.xmax = 0) AS inserted
), signal AS (
    SELECT pg_notify('dl_schedules', '') FROM upserted
)
SELECT u.name, u.inserted, (SELECT count(*) FROM signal) AS signaled FROM upserted u;
