"""The key index says "is running" in a column, and is the only one of its kind (issue 38's index
entries; bench/hot_key.py).

Why: 0045 gave the hot path's lock_key probes ix_dl_jobs_key_live, `(lock_key, status, key_parked)`
whose predicate `(status IN ('queued', 'running')) IS TRUE` only `... IS TRUE` status terms prove,
so that no index of the plain status column can stand in for it. But its status column could then
bound nothing: a probe's "is it running" and "is it queued" were filters on every entry of the key.
A key with 100,000 queued jobs (a burst behind a running key, before its holder parks them) made
each claim candidate's "does this key run?" read 100,000 entries, once per candidate of that key:
bench/hot_key.py's claim before parking went from 0.3 s to beyond 6 minutes. And the index beside
it, ix_dl_jobs_lock_key_active (the same columns, the plain predicate), still took an entry of
every job: 9 index entries per enqueued job where 0044 had 8 (+106 bytes of WAL per job).

What: ix_dl_jobs_key_live becomes `(lock_key, COALESCE(status = 'running', false), key_parked)`
with the same predicate. A probe says running as `COALESCE(status = 'running', false)` and queued
as `NOT COALESCE(...)`: both are conditions of the index's second column (a boolean expression
column matches the expression or its negation), neither is a condition any other index can take,
and the `IS TRUE` predicate term still proves the index's predicate. Every reader of
ix_dl_jobs_lock_key_active says its terms so (the claims, the step, the finishes' waiters and
parked heads, the claim's answer, the heartbeat's backlog, the park, lock_holders, the reaper's
sweep, the process statements, dl_take_key and dl_unpark_key_heads, replaced here), and it is
dropped: 8 index entries per job again.

Revision ID: 0046_key_state_index
Revises: 0045_key_probe_index
"""

import importlib

from alembic import op

revision = "0046_key_state_index"
down_revision = "0045_key_probe_index"
branch_labels = None
depends_on = None

_KEY_PARKING = "dataloader.storage.migrations.versions.0017_key_parking"
_KEY_PROBE = "dataloader.storage.migrations.versions.0045_key_probe_index"

KEY_LIVE = ("CREATE INDEX ix_dl_jobs_key_live ON dl_jobs (lock_key, (COALESCE(status = 'running', false)), "
            "key_parked) WHERE (status IN ('queued', 'running')) IS TRUE")
KEY_LIVE_0045 = ("CREATE INDEX ix_dl_jobs_key_live ON dl_jobs (lock_key, status, key_parked) "
                 "WHERE (status IN ('queued', 'running')) IS TRUE")
LOCK_KEY_ACTIVE_0017 = ("CREATE INDEX IF NOT EXISTS ix_dl_jobs_lock_key_active ON dl_jobs(lock_key, status, key_parked) "
                        "WHERE status IN ('queued', 'running')")


def _take_key() -> str:
    text = importlib.import_module(_KEY_PROBE).TAKE_KEY
    old = "AND (r.status > 'queued') IS TRUE"
    assert old in text
    return text.replace("(only ix_dl_jobs_key_live serves it, 0045)", "(only ix_dl_jobs_key_live serves it, 0046)").replace(
        old, "AND COALESCE(r.status = 'running', false)")


def _unpark_key_heads() -> str:
    """0017's function, its probe for an unparked job of the key ahead of the head said the way
    ix_dl_jobs_key_live serves (key, not running, not parked); the parked probes stay on
    ix_dl_jobs_key_parked, whose predicate the plain terms prove."""
    text = importlib.import_module(_KEY_PARKING).UNPARK_KEY_HEADS
    old = "WHERE u.lock_key = pair.lock_key AND u.status = 'queued' AND NOT u.key_parked"
    assert old in text
    return text.replace(old, "WHERE u.lock_key = pair.lock_key AND (u.status IN ('queued', 'running')) IS TRUE\n"
                             "               AND NOT COALESCE(u.status = 'running', false) AND NOT u.key_parked")


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_key_live")
    op.execute(KEY_LIVE)
    op.execute(_take_key())
    op.execute(_unpark_key_heads())
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_lock_key_active")


def downgrade() -> None:
    op.execute(LOCK_KEY_ACTIVE_0017)
    op.execute(importlib.import_module(_KEY_PARKING).UNPARK_KEY_HEADS)
    op.execute(importlib.import_module(_KEY_PROBE).TAKE_KEY)
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_key_live")
    op.execute(KEY_LIVE_0045)
