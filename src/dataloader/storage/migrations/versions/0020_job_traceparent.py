"""The trace context of the call that enqueued a job, on the job: `traceparent text`.

Why: a job's run is a span of the trace that enqueued it (an HTTP trigger, a producer's span), also
when another process runs it. The enqueue statements write the caller's W3C traceparent
(`00-<trace id>-<span id>-<flags>`, 55 characters) on the row and the claim returns it from its own
UPDATE, as 0018 does for the request id: no look-up per claimed job.

What: `traceparent text`, nullable, no default (not a spec column; catalog-only). NULL when tracing
is off or the caller had no span: a NULL costs no bytes in a row that already has a null bitmap, so
an untraced enqueue writes the same row as before. Written once at enqueue (insert_job,
insert_job_group, insert_restartable_job, insert_jobs_batch*, and a process caller's task:
insert_task, enqueue_caller); a retry keeps it (the same row); a chain's next stage gets the span of
the attempt whose finish inserts it (finish_jobs, finish_in_transaction).

Revision ID: 0020_job_traceparent
Revises: 0019_queue_flow
"""

from alembic import op

revision = "0020_job_traceparent"
down_revision = "0019_queue_flow"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS traceparent text")


def downgrade() -> None:
    op.execute("ALTER TABLE dl_jobs DROP COLUMN IF EXISTS traceparent")
