"""The span of a job's last traced attempt, on the job: `attempt_span text`.

Why: a retry's attempt is a span linked to the attempt that failed (OpenTelemetry messaging: a
redelivery links to the earlier delivery), also when another process runs it. The finish that sends
a traced attempt back to the queue (finish_jobs.sql) stores that attempt's span; the claim returns it
from its own UPDATE, as it does the enqueue's `traceparent` (0020), and the next attempt links to it.

What: `attempt_span text` (W3C traceparent format), nullable, no default, catalog-only. NULL when
tracing is off: the finish rewrites the row anyway, so an untraced finish writes the same row as
before. A new migration rather than a change to 0020, which databases already applied.

Revision ID: 0021_job_attempt_span
Revises: 0020_job_traceparent
"""

from alembic import op

revision = "0021_job_attempt_span"
down_revision = "0020_job_traceparent"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS attempt_span text")


def downgrade() -> None:
    op.execute("ALTER TABLE dl_jobs DROP COLUMN IF EXISTS attempt_span")
