"""The queue schema of the specification (003 §4), verbatim.

Revision ID: 0001_spec_schema
Revises:
"""

import re

from alembic import op

revision = "0001_spec_schema"
down_revision = None
branch_labels = None
depends_on = None

SPEC_DDL = r"""
CREATE TYPE dl_status AS ENUM ('queued','running','succeeded','failed','canceled','lost');

CREATE TABLE dl_jobs (
  job_id uuid PRIMARY KEY,
  queue text NOT NULL,
  task text NOT NULL,
  args jsonb NOT NULL DEFAULT '{}'::jsonb,
  idempotency_key text UNIQUE,
  lock_key text NOT NULL,
  partition_key text NOT NULL DEFAULT '',
  priority int NOT NULL DEFAULT 100,
  available_at timestamptz NOT NULL DEFAULT now(),
  status dl_status NOT NULL DEFAULT 'queued',
  attempt int NOT NULL DEFAULT 0,
  max_attempts int NOT NULL DEFAULT 5,
  lease_ttl_sec int NOT NULL DEFAULT 60,
  lease_expires_at timestamptz,
  heartbeat_at timestamptz,
  cancel_requested boolean NOT NULL DEFAULT false,
  progress jsonb NOT NULL DEFAULT '{}'::jsonb,
  error text,
  producer text,
  consumer_group text,
  created_at timestamptz NOT NULL DEFAULT now(),
  started_at timestamptz,
  finished_at timestamptz,
  CONSTRAINT dl_jobs_chk_positive CHECK (priority >= 0 AND attempt >= 0 AND max_attempts >= 0 AND lease_ttl_sec > 0)
);

CREATE INDEX ix_dl_jobs_claim ON dl_jobs(queue, available_at, priority, created_at)
WHERE status = 'queued';

CREATE INDEX ix_dl_jobs_running_lease ON dl_jobs(lease_expires_at)
WHERE status = 'running';

CREATE INDEX ix_dl_jobs_status_queue ON dl_jobs(status, queue);

CREATE TABLE dl_job_events (
  event_id bigserial PRIMARY KEY,
  job_id uuid NOT NULL REFERENCES dl_jobs(job_id) ON DELETE CASCADE,
  queue text NOT NULL,
  ts timestamptz NOT NULL DEFAULT now(),
  kind text NOT NULL,
  payload jsonb
);

CREATE OR REPLACE FUNCTION notify_job_ready() RETURNS trigger AS $$
BEGIN
  IF (TG_OP = 'INSERT') THEN
    PERFORM pg_notify('dl_jobs', NEW.queue);
    RETURN NEW;
  ELSIF (TG_OP = 'UPDATE') THEN
    IF NEW.status = 'queued' AND NEW.available_at <= now()
       AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.available_at IS DISTINCT FROM NEW.available_at) THEN
      PERFORM pg_notify('dl_jobs', NEW.queue);
    END IF;
    RETURN NEW;
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS dl_jobs_notify_ins ON dl_jobs;
CREATE TRIGGER dl_jobs_notify_ins
AFTER INSERT ON dl_jobs
FOR EACH ROW EXECUTE FUNCTION notify_job_ready();

DROP TRIGGER IF EXISTS dl_jobs_notify_upd ON dl_jobs;
CREATE TRIGGER dl_jobs_notify_upd
AFTER UPDATE OF status, available_at ON dl_jobs
FOR EACH ROW EXECUTE FUNCTION notify_job_ready();
"""


def spec_statements() -> list[str]:
    """The DDL split into single statements (asyncpg prepares each one; a prepared statement holds
    one command). Statements start at column 0; the function body is indented, so its own
    semicolons never split."""
    parts = re.split(r";\s*\n(?=(?:CREATE|DROP) )", SPEC_DDL.strip())
    return [p if p.rstrip().endswith(";") else p + ";" for p in parts if p.strip()]


def upgrade() -> None:
    for statement in spec_statements():
        op.execute(statement)


def downgrade() -> None:
    op.execute(
        "DROP TABLE IF EXISTS dl_job_events; DROP TABLE IF EXISTS dl_jobs; "
        "DROP FUNCTION IF EXISTS notify_job_ready(); DROP TYPE IF EXISTS dl_status;"
    )
