"""Jobs waiting behind a running lock_key leave the claim's index: `key_parked`.

Why: the claim walks ix_dl_jobs_claim_order in claim order and rejects each job whose lock_key
already runs (`NOT EXISTS running`). 100,000 queued jobs of one busy key ahead of everyone made
every claim of the other keys walk 100,000 rows (17 ms instead of 0.5 ms, bench/hot_key.py).

What: `key_parked boolean NOT NULL DEFAULT false` (not a spec column; a constant default, so
adding it is catalog-only). ix_dl_jobs_claim_order gets `AND NOT key_parked` in its predicate, so a
parked job is not in the claim's walk at all. ix_dl_jobs_key_parked holds the parked jobs by
(lock_key, queue, claim order): it finds a key's parked head, and is empty when no key is hot, so
the common path pays one probe into an empty index. ix_dl_jobs_lock_key_active gains key_parked as
a third column (same rows, same prefix for every existing lookup), so a key's unparked waiters are
found without visiting its parked ones.

Who parks: only the worker that holds the key, on its control connection (park_key_waiters.sql),
in batches between its own steps, and only while its attempt runs with at least half its lease
left. The claim tells it when the key it just took has a backlog (16 or more unparked waiters;
fewer cost the claim less than parking them would). Because the holder parks on the connection
that also writes the key's finish, a finish always sees every job parked behind it, and the reaper
(which only takes a lease that expired) cannot overlap a park statement of the live holder. A
parker outside the holder (a periodic service) would race the finish: its park could commit after
the finish's snapshot was taken, and the key would be free with its whole backlog parked.

Who unparks: `dl_unpark_key_heads(keys)`, called by every statement that frees a key (finish_jobs
for every outcome, also 'committed' after a pipeline's ctx.transaction(); reap_expired; a cancel of
a queued job). For each (key, queue) with parked jobs it unparks the first parked job in claim
order, unless an unparked runnable job of that key and queue comes before it (that one runs first,
and its finish unparks the next), and NOTIFYs the queue. Order within a key and queue is the
claim's (priority, available_at, created_at): the head is the first parked job, and an unparked
job (a newcomer, a retry) competes with it in the claim's ordered walk. The reaper statement also
sweeps: any key with parked jobs and nothing running gets its heads unparked, so a key left parked
by a path that does not call the function (a crash between a ctx.transaction() commit and the
holder's release, a bulk cancel of a head) waits at most one reaper period (DL_REAPER_PERIOD_SEC,
10 s by default).

Revision ID: 0017_key_parking
Revises: 0016_process_recovery
"""

from alembic import op

revision = "0017_key_parking"
down_revision = "0016_process_recovery"
branch_labels = None
depends_on = None

UNPARK_KEY_HEADS = r"""
CREATE OR REPLACE FUNCTION dl_unpark_key_heads(keys text[]) RETURNS integer AS $$
DECLARE
  woken integer;
BEGIN
  -- a loose index scan: each (key, queue) with parked jobs once, not each parked job
  WITH RECURSIVE pair(lock_key, queue) AS (
      SELECT k.lock_key,
             (SELECT p.queue FROM dl_jobs p
              WHERE p.lock_key = k.lock_key AND p.status = 'queued' AND p.key_parked
              ORDER BY p.queue LIMIT 1)
      FROM (SELECT DISTINCT unnest(keys) AS lock_key) k
      UNION ALL
      SELECT pair.lock_key,
             (SELECT p.queue FROM dl_jobs p
              WHERE p.lock_key = pair.lock_key AND p.status = 'queued' AND p.key_parked AND p.queue > pair.queue
              ORDER BY p.queue LIMIT 1)
      FROM pair
      WHERE pair.queue IS NOT NULL
  ), head AS (
      SELECT h.job_id
      FROM pair
      CROSS JOIN LATERAL (
          SELECT p.job_id, p.priority, p.available_at, p.created_at
          FROM dl_jobs p
          WHERE p.lock_key = pair.lock_key AND p.queue = pair.queue AND p.status = 'queued' AND p.key_parked
          ORDER BY p.priority, p.available_at, p.created_at
          LIMIT 1
      ) h
      WHERE pair.queue IS NOT NULL
        AND (SELECT 1 FROM dl_jobs u
             WHERE u.lock_key = pair.lock_key AND u.status = 'queued' AND NOT u.key_parked
               AND u.queue = pair.queue AND u.available_at <= now()
               AND (u.priority, u.available_at, u.created_at) <= (h.priority, h.available_at, h.created_at)
             LIMIT 1) IS NULL
  ), unparked AS (
      UPDATE dl_jobs j SET key_parked = false
      FROM head
      WHERE j.job_id = head.job_id AND j.status = 'queued' AND j.key_parked
      RETURNING j.queue
  )
  SELECT count(*)::integer INTO woken
  FROM (SELECT pg_notify('dl_jobs', d.queue) FROM (SELECT DISTINCT queue FROM unparked) d) n;
  RETURN woken;
END $$ LANGUAGE plpgsql VOLATILE
"""


def upgrade() -> None:
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS key_parked boolean NOT NULL DEFAULT false")
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_claim_order")
    op.execute(
        "CREATE INDEX ix_dl_jobs_claim_order ON dl_jobs(queue, priority, available_at, created_at) "
        "WHERE status = 'queued' AND NOT key_parked"
    )
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_lock_key_active")
    op.execute(
        "CREATE INDEX ix_dl_jobs_lock_key_active ON dl_jobs(lock_key, status, key_parked) "
        "WHERE status IN ('queued', 'running')"
    )
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_dl_jobs_key_parked ON dl_jobs(lock_key, queue, priority, available_at, "
        "created_at) WHERE status = 'queued' AND key_parked"
    )
    op.execute(UNPARK_KEY_HEADS)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS dl_unpark_key_heads(text[])")
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_key_parked")
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_lock_key_active")
    op.execute(
        "CREATE INDEX ix_dl_jobs_lock_key_active ON dl_jobs(lock_key, status) WHERE status IN ('queued', 'running')"
    )
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_claim_order")
    op.execute(
        "CREATE INDEX ix_dl_jobs_claim_order ON dl_jobs(queue, priority, available_at, created_at) "
        "WHERE status = 'queued'"
    )
    op.execute("ALTER TABLE dl_jobs DROP COLUMN IF EXISTS key_parked")
