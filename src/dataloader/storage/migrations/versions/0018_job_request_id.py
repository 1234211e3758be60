"""The request id of the call that enqueued a job, on the job: `request_id text`.

Why: worker log lines carry the request id of the HTTP call that enqueued their job. The claim
used to read it from the job's 'queued' journal row, one probe of ix_dl_job_events_job (and a heap
fetch) per claimed job, in the claim statement every job passes through. The enqueue statements
now also write it on the row (the 'queued' journal row keeps it too: the journal stays the
history), and the claim returns it from its own UPDATE.

What: `request_id text`, nullable, no default (not a spec column; catalog-only, and a NULL costs
no bytes in a row that already has a null bitmap). Written once at enqueue (insert_job,
insert_job_group, insert_restartable_job, the process task inserts); a re-trigger, a retry or a
chain stage does not change it, as the claim's look-up of the first 'queued' row did not.
Backfilled here for the queued and running jobs (the ones a claim, or the claim after a lost
lease, will still read); a job that finished before this migration and is retried by hand later
runs with no request id in its log lines (its journal still holds it).

Revision ID: 0018_job_request_id
Revises: 0017_key_parking
"""

from alembic import op

revision = "0018_job_request_id"
down_revision = "0017_key_parking"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS request_id text")
    op.execute(
        "UPDATE dl_jobs j SET request_id = q.request_id "
        "FROM (SELECT DISTINCT ON (e.job_id) e.job_id, e.payload->>'request_id' AS request_id "
        "      FROM dl_jobs a JOIN dl_job_events e ON e.job_id = a.job_id AND e.kind = 'queued' "
        "      WHERE a.status IN ('queued', 'running') "
        "      ORDER BY e.job_id, e.event_id) q "
        "WHERE j.job_id = q.job_id AND q.request_id IS NOT NULL AND j.request_id IS NULL"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE dl_jobs DROP COLUMN IF EXISTS request_id")
