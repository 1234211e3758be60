"""Restart from before a gather, and a notification when a workflow run ends.

- `dl_workflow_runs.generation`: how many times the run was restarted (`app.workflows.restart`
  adds one in the statement that cuts its history). A gather's children (and any job derived from
  a run and a history position) take their ids and idempotency keys from (run, generation,
  position), so the replay after a restart inserts NEW children instead of finding the old ones.
- `dl_workflow_runs.parent_generation`: the parent's generation a child was started in. The join
  counts a child's end only while that is still its parent's generation: the old generation's
  children are detached by the very statement that bumps it, whatever order the rest of a restart
  runs in (cancelling them, retrying the run), so a crash between those parts can never let an
  old child count in a new join.
- `dl_workflow_child_end` (0030's trigger, same WHEN: a workflow job reaching a terminal status)
  also sends `NOTIFY dl_workflow_end, '<run id>'`: `app.workflows.result` waits on it instead of
  polling. A plain job's finish pays nothing: the trigger's WHEN lets it pass without a call, as
  before.

Revision ID: 0037_workflow_generations
Revises: 0036_workflow_step_jobs
"""

from alembic import op

revision = "0037_workflow_generations"
down_revision = "0036_workflow_step_jobs"
branch_labels = None
depends_on = None

CHILD_END = """
    CREATE OR REPLACE FUNCTION dl_workflow_child_end() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        v_parent uuid;
        v_seq int;
        v_generation int;
        v_left int;
        v_fast boolean;
    BEGIN
        -- whoever waits for this run's result (workflows/manager.py `result`) reads it again
        PERFORM pg_notify('dl_workflow_end', NEW.job_id::text);
        -- `joined` flips once: a child revived by a manual retry and ending again is not counted
        -- again; a child of a generation its parent left by a restart is not counted at all
        UPDATE dl_workflow_runs c SET joined = true
        FROM dl_workflow_runs p
        WHERE c.run_id = NEW.job_id AND c.parent_run_id IS NOT NULL AND NOT c.joined
          AND p.run_id = c.parent_run_id AND p.generation = c.parent_generation
        RETURNING c.parent_run_id, c.parent_seq, c.parent_generation INTO v_parent, v_seq, v_generation;
        IF v_parent IS NULL THEN
            RETURN NULL;
        END IF;
        -- the generation again, in this statement's fresh snapshot: a restart that committed since
        -- the statement above (and a new gather at this position) must not be counted down
        UPDATE dl_workflow_steps s SET remaining = s.remaining - 1
        FROM dl_workflow_runs p
        WHERE s.run_id = v_parent AND s.seq = v_seq AND s.kind = 'gather'
          AND p.run_id = v_parent AND p.generation = v_generation
        RETURNING s.remaining, s.fail_fast INTO v_left, v_fast;
        -- the last end completes the join; a fail-fast gather also looks at the first failure
        IF v_left = 0 OR (v_fast AND NEW.status <> 'succeeded') THEN
            PERFORM dl_workflow_wake(v_parent);
        END IF;
        RETURN NULL;
    END
    $$
"""

# 0030's, for the downgrade
CHILD_END_0030 = """
    CREATE OR REPLACE FUNCTION dl_workflow_child_end() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        v_parent uuid;
        v_seq int;
        v_left int;
        v_fast boolean;
    BEGIN
        UPDATE dl_workflow_runs SET joined = true
        WHERE run_id = NEW.job_id AND parent_run_id IS NOT NULL AND NOT joined
        RETURNING parent_run_id, parent_seq INTO v_parent, v_seq;
        IF v_parent IS NULL THEN
            RETURN NULL;
        END IF;
        UPDATE dl_workflow_steps SET remaining = remaining - 1
        WHERE run_id = v_parent AND seq = v_seq AND kind = 'gather'
        RETURNING remaining, fail_fast INTO v_left, v_fast;
        IF v_left = 0 OR (v_fast AND NEW.status <> 'succeeded') THEN
            PERFORM dl_workflow_wake(v_parent);
        END IF;
        RETURN NULL;
    END
    $$
"""


def upgrade() -> None:
    op.execute("ALTER TABLE dl_workflow_runs ADD COLUMN IF NOT EXISTS generation int NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE dl_workflow_runs ADD COLUMN IF NOT EXISTS parent_generation int NOT NULL DEFAULT 0")
    op.execute(CHILD_END)


def downgrade() -> None:
    op.execute(CHILD_END_0030)
    op.execute("ALTER TABLE dl_workflow_runs DROP COLUMN IF EXISTS parent_generation")
    op.execute("ALTER TABLE dl_workflow_runs DROP COLUMN IF EXISTS generation")
