"""A claim checks that its lock_key runs nowhere *after* it got the key's advisory lock (promise 2: one
holder per lock_key), in a snapshot taken after the lock.

Why: a claim statement reads "no job of this key runs" in its statement's snapshot, then asks for the
key's advisory lock. The snapshot can predate another session's claim of the same key: that claim
held the lock, committed its job as running, and then its session died (terminated, its node
killed), which released the lock. The first claim then got the lock, its old snapshot still showed
the key free, and it started a second job of the key while the first ran (the worker of a killed
session learns of it only at its next statement). tests/workers/test_session_kills.py saw it under
its session churn; tests/workers/test_claim.py drives it step by step.

What: `dl_take_key(lock_key, finishing_jobs, finishing_attempts)`, which every claim calls in place
of the bare `pg_try_advisory_lock(hashtext(lock_key))`. It asks for the lock; when it got it, it
looks for a running job of the key in a fresh snapshot (a VOLATILE plpgsql function: each query sees
what committed before it ran, so after the lock), and gives the lock back and answers false when
there is one. A running job committed by a session that held the key is visible then: its commit
came before its session's locks were released. The finishing arrays (step_succeeded_claim.sql) name
the attempts the calling statement itself ends, whose keys are free once it is done. Advisory locks
are re-entrant: a key this session already holds is granted again, and given back once if one of
its jobs still runs (the claim's caller compares lock hashes for the rest).

Revision ID: 0044_claim_key_after_lock
Revises: 0043_audit_trail
"""

from alembic import op

revision = "0044_claim_key_after_lock"
down_revision = "0043_audit_trail"
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
    -- claim_key_free.sql's probe (only ix_dl_jobs_lock_key_active serves it), in a snapshot taken now
    IF EXISTS (SELECT 1 FROM dl_jobs r
               WHERE r.lock_key = p_lock_key AND r.status IN ('queued', 'running') AND r.status > 'queued'
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


def upgrade() -> None:
    op.execute(TAKE_KEY)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS dl_take_key(text, uuid[], int[])")
