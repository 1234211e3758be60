"""Step jobs: a workflow step with a queue, lock_key or other job options of its own runs as a job
of its own (task `workflow-step:<workflow>`), joined by its run like a child (docs/workflows.md
"Steps as jobs of their own").

- `dl_workflow_steps.job_id`: the step job of a position (NULL: the step runs inside its run's
  job). Its pending record is written with `remaining` = 1 in the transaction that inserts the job,
  so the job can never end before the counter that counts its end exists. No foreign key: retention
  may delete a finished step job long before its run, and the history keeps naming it.
- Two triggers on dl_jobs count a step job's end once, in the transaction of that end: its finish,
  a cancel, the reaper's `lost`, a bulk operation (an UPDATE of status to a terminal one), or the
  delete of an unfinished one. `remaining` going 1 → 0 is the once; it wakes the run
  (`dl_workflow_wake`, 0030), which then reads what the step job recorded — or, when it ended
  without a record, records the step failed with how its job ended. The WHEN clauses let every
  other job pass without calling anything.

Revision ID: 0036_workflow_step_jobs
Revises: 0035_workflow_tokens
"""

from alembic import op

revision = "0036_workflow_step_jobs"
down_revision = "0035_workflow_tokens"
branch_labels = None
depends_on = None

STATEMENTS = [
    "ALTER TABLE dl_workflow_steps ADD COLUMN IF NOT EXISTS job_id uuid",
    # the end of a step job finds its position by this
    """
    CREATE INDEX IF NOT EXISTS ix_dl_workflow_steps_job ON dl_workflow_steps (job_id)
    WHERE job_id IS NOT NULL
    """,
    """
    CREATE OR REPLACE FUNCTION dl_workflow_step_job_end() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        v_run uuid;
    BEGIN
        -- remaining flips 1 -> 0 once: a step job revived by a manual retry is not counted again
        UPDATE dl_workflow_steps SET remaining = 0
        WHERE job_id = (CASE WHEN TG_OP = 'DELETE' THEN OLD.job_id ELSE NEW.job_id END) AND remaining > 0
        RETURNING run_id INTO v_run;
        IF v_run IS NOT NULL THEN
            PERFORM dl_workflow_wake(v_run);
        END IF;
        RETURN NULL;
    END
    $$
    """,
    "DROP TRIGGER IF EXISTS dl_workflow_step_job_end ON dl_jobs",
    """
    CREATE TRIGGER dl_workflow_step_job_end AFTER UPDATE OF status ON dl_jobs FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'canceled', 'lost')
          AND OLD.status IN ('queued', 'running') AND starts_with(NEW.task, 'workflow-step:'))
    EXECUTE FUNCTION dl_workflow_step_job_end()
    """,
    "DROP TRIGGER IF EXISTS dl_workflow_step_job_deleted ON dl_jobs",
    """
    CREATE TRIGGER dl_workflow_step_job_deleted AFTER DELETE ON dl_jobs FOR EACH ROW
    WHEN (OLD.status IN ('queued', 'running') AND starts_with(OLD.task, 'workflow-step:'))
    EXECUTE FUNCTION dl_workflow_step_job_end()
    """,
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    for statement in (
        "DROP TRIGGER IF EXISTS dl_workflow_step_job_deleted ON dl_jobs",
        "DROP TRIGGER IF EXISTS dl_workflow_step_job_end ON dl_jobs",
        "DROP FUNCTION IF EXISTS dl_workflow_step_job_end()",
        "DROP INDEX IF EXISTS ix_dl_workflow_steps_job",
        "ALTER TABLE dl_workflow_steps DROP COLUMN IF EXISTS job_id",
    ):
        op.execute(statement)
