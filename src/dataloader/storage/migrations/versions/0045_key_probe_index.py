"""The hot path's lock_key probes get an index that ix_dl_jobs_status_queue can never stand in for
(issue 39's sustained run).

Why: every claim asks "does a job of this key run?" per candidate, every finish asks "which queues
wait for the keys I free?", and the claim's dl_take_key (0044) asks again after the lock. Each
probe said its status as `status IN ('queued', 'running') AND status > 'queued'` (or `< 'running'`)
so that ix_dl_jobs_lock_key_active (lock_key first, predicate: those two statuses) serves it by
its key. But ix_dl_jobs_status_queue (003's `(status, queue)`, every row) can take the same status
terms as its index condition. In a sustained run at 2,100 jobs/s (bench/sustained.py, PostgreSQL 15)
an autovacuum ANALYZE taken while the queue was drained recorded almost no queued or running row,
and the churned partial index holds thousands of pages for a few live entries, so the planner
costed one lock_key probe of it at 96 and a walk of status_queue's queued (or running) part at
10-47: it walked status_queue, filtering by lock_key. That part holds an entry for every job
queued since the last vacuum (126,000 at that rate), so every finish and every claim candidate
read them all; the drain fell from 2,100 to 20-130 jobs/s for 20-60 s after every other autovacuum
of dl_jobs.

What: ix_dl_jobs_key_live, the same columns as ix_dl_jobs_lock_key_active with the predicate
written as `(status IN ('queued', 'running')) IS TRUE`. A probe that says its status terms the same
way (`... IS TRUE`) proves that predicate, and no index on the plain status column can use such a
term as an index condition (a boolean test of an expression is not a comparison of the column),
so the probe's only index path is this one, by lock_key, whatever the statistics say. The probes
of claim_key_free.sql, step_succeeded_claim.sql, finish_release_keys.sql and dl_take_key (replaced
here) say it so; ix_dl_jobs_lock_key_active stays for the operators' and workflows' reads.

Revision ID: 0045_key_probe_index
Revises: 0044_claim_key_after_lock
"""

from alembic import op

revision = "0045_key_probe_index"
down_revision = "0044_claim_key_after_lock"
branch_labels = None
depends_on = None

TAKE_KEY = r"""
CREATE OR REPLACE FUNCTION dl_take_key(p_lock_key text, p_finishing_jobs uuid[] DEFAULT NULL,
                                       p_finishing_attempts int[] DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT pg_try_advisory_lock(hashtext(p_lock_key)) THEN
        RETURN false;
    END IF;
    -- claim_key_free.sql's probe (only ix_dl_jobs_key_live serves it, 0045), in a snapshot taken now
    IF EXISTS (SELECT 1 FROM dl_jobs r
               WHERE r.lock_key = p_lock_key AND (r.status IN ('queued', 'running')) IS TRUE
                 AND (r.status > 'queued') IS TRUE
                 AND (p_finishing_jobs IS NULL
                      OR NOT EXISTS (SELECT 1 FROM unnest(p_finishing_jobs, p_finishing_attempts) AS f(job_id, attempt)
                                     WHERE f.job_id = r.job_id AND f.attempt = r.attempt))) THEN
        PERFORM pg_advisory_unlock(hashtext(p_lock_key));
        RETURN false;
    END IF;
    RETURN true;
END
$$
"""

TAKE_KEY_0044 = TAKE_KEY.replace(
    "(only ix_dl_jobs_key_live serves it, 0045)", "(only ix_dl_jobs_lock_key_active serves it)"
).replace(
    "AND (r.status IN ('queued', 'running')) IS TRUE\n                 AND (r.status > 'queued') IS TRUE",
    "AND r.status IN ('queued', 'running') AND r.status > 'queued'",
)


def upgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_dl_jobs_key_live ON dl_jobs (lock_key, status, key_parked) "
        "WHERE (status IN ('queued', 'running')) IS TRUE"
    )
    op.execute(TAKE_KEY)


def downgrade() -> None:
    op.execute(TAKE_KEY_0044)
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_key_live")
