-- Per queue, the jobs an operator alerts on (dl_jobs_lease_expired, dl_jobs_held; read at scrape
-- time, so every node reports the database's numbers): `running` jobs whose lease has expired and
-- that the reaper has not taken back yet (a few for a moment is normal; many, or old, means no
-- reaper runs), and held jobs (`failed` with held_at set, issue 11). Each side walks a partial index
-- (ix_dl_jobs_running_lease, ix_dl_jobs_held) and stops after $1 rows, so a scrape stays cheap
-- whatever the backlog: a count at the cap means "at least". Timestamps are clamped into
-- [1970-01-01, now()] so that no stored value (+-infinity) can make the subtraction overflow.
-- $1 cap: the most rows each side counts
SELECT queue, 'lease_expired' AS kind, count(*)::int AS jobs,
       extract(epoch FROM now() - min(expired_at))::float8 AS oldest_sec
FROM (SELECT queue, GREATEST(LEAST(lease_expires_at, now()), timestamptz '1970-01-01 00:00:00+00') AS expired_at
      FROM dl_jobs
      WHERE status = 'running' AND lease_expires_at < now()
      LIMIT $1) AS expired
GROUP BY queue
UNION ALL
SELECT queue, 'held' AS kind, count(*)::int AS jobs,
       extract(epoch FROM now() - min(held)) ::float8 AS oldest_sec
FROM (SELECT queue, GREATEST(LEAST(held_at, now()), timestamptz '1970-01-01 00:00:00+00') AS held
      FROM dl_jobs
      WHERE status = 'failed' AND held_at IS NOT NULL
      LIMIT $1) AS held_jobs
GROUP BY queue
ORDER BY 1, 2;
