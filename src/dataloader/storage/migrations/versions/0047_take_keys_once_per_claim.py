"""A claim takes its keys in one call (issue 38: PostgreSQL's CPU per job in the drain).

Why: every claim called 0044's dl_take_key once per candidate that heads its lock_key, each call a
plpgsql function running its check after the lock as an SPI statement of its own. In a drain that
was 8.7 % of PostgreSQL's CPU (perf, bench/README.md "Where PostgreSQL's CPU goes in the step");
36 keys took 390 µs of server time one call each and 110 µs in one call.

What: `dl_take_keys(lock_keys, finishing_jobs, finishing_attempts)`, the keys of `lock_keys` this
session now holds. It asks for each key's advisory lock, then looks, in one query of a snapshot
taken after every one of those locks, for a running job of the keys it got; a key with one is given
back (once: a key this session held already stays held once, as dl_take_key's re-entrant grant
did) and left out. The finishing arrays are dl_take_key's. What a claim promises is unchanged: the
check still comes after the lock, so a holder that committed its start and then lost its session
(and its lock) is seen (tests/flow/test_key_race_in_flight.py). The check says its terms as every
key probe does (0046), so only ix_dl_jobs_key_live serves it. dl_take_key stays for the gate's
claims (limited and fair queues, claim_gate_take.sql), which ask per candidate as the gate admits it.

Revision ID: 0047_take_keys_once_per_claim
Revises: 0046_key_state_index
"""

from alembic import op

revision = "0047_take_keys_once_per_claim"
down_revision = "0046_key_state_index"
branch_labels = None
depends_on = None

TAKE_KEYS = r"""
CREATE OR REPLACE FUNCTION dl_take_keys(p_lock_keys text[], p_finishing_jobs uuid[] DEFAULT NULL,
                                        p_finishing_attempts int[] DEFAULT NULL)
RETURNS text[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    k text;
    got text[] := '{}';
    busy text[];
BEGIN
    IF p_lock_keys IS NULL THEN
        RETURN got;
    END IF;
    FOREACH k IN ARRAY p_lock_keys LOOP
        IF k IS NOT NULL AND pg_try_advisory_lock(hashtext(k)) THEN
            got := got || k;
        END IF;
    END LOOP;
    IF cardinality(got) = 0 THEN
        RETURN got;
    END IF;
    -- claim_key_free.sql's probe (only ix_dl_jobs_key_live serves it, 0046), in a snapshot taken now,
    -- after every lock above
    SELECT array_agg(DISTINCT r.lock_key) INTO busy
    FROM dl_jobs r
    WHERE r.lock_key = ANY (got) AND (r.status IN ('queued', 'running')) IS TRUE
      AND COALESCE(r.status = 'running', false)
      AND (p_finishing_jobs IS NULL
           OR NOT EXISTS (SELECT 1 FROM unnest(p_finishing_jobs, p_finishing_attempts) AS f(job_id, attempt)
                          WHERE f.job_id = r.job_id AND f.attempt = r.attempt));
    IF busy IS NULL THEN
        RETURN got;
    END IF;
    FOREACH k IN ARRAY busy LOOP
        PERFORM pg_advisory_unlock(hashtext(k));
    END LOOP;
    RETURN ARRAY(SELECT g FROM unnest(got) AS g WHERE g <> ALL (busy));
END
$$
"""


def upgrade() -> None:
    op.execute(TAKE_KEYS)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS dl_take_keys(text[], uuid[], int[])")
