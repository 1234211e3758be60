-- Observers waiting for a node to run them (dl_observers_waiting): due to run (`created`, desired
-- `run`, restart_at passed) but not taken, by kind. A live node with room claims a due observer at
-- once (NOTIFY), so one that stays here means no live node has capacity (or code) for its kind.
-- Walks ix_dl_observers_waiting and stops after $1 rows; restart_at is clamped into
-- [1970-01-01, now()] so that an odd stored value cannot overflow the subtraction.
-- $1 cap: the most observers counted
SELECT kind, count(*)::int AS observers, extract(epoch FROM now() - min(due_at))::float8 AS oldest_sec
FROM (SELECT kind, GREATEST(LEAST(restart_at, now()), timestamptz '1970-01-01 00:00:00+00') AS due_at
      FROM dl_observers
      WHERE state = 'created' AND desired = 'run' AND restart_at <= now()
      LIMIT $1) AS due
GROUP BY kind
ORDER BY kind;
