"""Durable workflows (issue 37): a run is a job, its history is rows beside it.

- `dl_workflow_runs`: one row per run; `run_id` IS the `dl_jobs.job_id` of the job that runs it
  (task `workflow:<name>`), so the console, operations, flow control and the journal see a run as
  the job it is, and the row goes with the job (ON DELETE CASCADE: retention prunes both). A child
  run names its parent and the gather (`parent_seq`) that waits for it; `joined` says that child's
  end was counted by that gather — once, whatever ends it and however often it is revived.
  `wakes` counts the reasons to run again (a signal, a join complete); `seen_wakes` is the count
  the run's last attempt read before it suspended.
- `dl_workflow_steps`: the recorded history, one row per position (`seq` 1, 2, 3… in the order the
  code asks): `kind` step / sleep / wait / gather / patch (a version gate's marker), its `name`, `state` (done, failed, or pending:
  a step between retries, a wait not yet answered, a gather whose children are not all ended),
  its `result` (JSON) or `error`, `attempts`, `wake_at` (a sleep's end, a wait's deadline, a
  retry's time) and a gather's `remaining` (the join counter) and `fail_fast` (wake it at the
  first child that does not succeed, too).
- `dl_workflow_signals`: signals sent to a run, kept until a wait consumes one (`consumed_seq`).

Two triggers on dl_jobs, each with a WHEN that lets every non-workflow row pass without calling
anything (the hot finish path pays one string comparison):
- `dl_workflow_child_end` (AFTER UPDATE OF status): a workflow job reaching a terminal status —
  by its finish, a cancel, the reaper's `lost`, a bulk operation: every path is an UPDATE of
  status — marks its run `joined` (once) and counts down its parent's gather in the SAME
  transaction as the end. The count reaching zero (or, for a fail-fast gather, a child that did
  not succeed) wakes the parent.
- `dl_workflow_requeue` (BEFORE UPDATE OF status, running → queued): a run handing itself back
  (a sleep, a wait, a join not complete) while a wake arrived after it last looked
  (`wakes > seen_wakes`) is made due now instead of at its planned time. With the waker locking
  the job row first (`dl_workflow_wake`), a wake can never fall between a run's last look and its
  hand-back: either the hand-back waits for the waker's commit and then, in a fresh snapshot,
  sees the wake, or the waker waits for the hand-back and then finds the job queued and makes it
  due itself.

Revision ID: 0030_workflows
Revises: 0029_claim_fence
"""

from alembic import op

revision = "0030_workflows"
down_revision = "0029_claim_fence"
branch_labels = None
depends_on = None

STATEMENTS = [
    """
    CREATE TABLE IF NOT EXISTS dl_workflow_runs (
      run_id uuid PRIMARY KEY REFERENCES dl_jobs(job_id) ON DELETE CASCADE,
      workflow text NOT NULL,
      parent_run_id uuid,
      parent_seq int,
      joined boolean NOT NULL DEFAULT false,
      wakes bigint NOT NULL DEFAULT 0,
      seen_wakes bigint NOT NULL DEFAULT 0,
      created_at timestamptz NOT NULL DEFAULT now()
    )
    """,
    # no foreign key to the parent: retention may delete a parent before its children
    """
    CREATE INDEX IF NOT EXISTS ix_dl_workflow_runs_parent ON dl_workflow_runs (parent_run_id, parent_seq)
    WHERE parent_run_id IS NOT NULL
    """,
    """
    CREATE TABLE IF NOT EXISTS dl_workflow_steps (
      run_id uuid NOT NULL REFERENCES dl_workflow_runs(run_id) ON DELETE CASCADE,
      seq int NOT NULL,
      kind text NOT NULL,
      name text NOT NULL,
      state text NOT NULL,
      result jsonb,
      error text,
      attempts int NOT NULL DEFAULT 0,
      wake_at timestamptz,
      remaining int,
      fail_fast boolean NOT NULL DEFAULT false,
      created_at timestamptz NOT NULL DEFAULT now(),
      finished_at timestamptz,
      PRIMARY KEY (run_id, seq),
      CONSTRAINT dl_workflow_steps_kind CHECK (kind IN ('step', 'sleep', 'wait', 'gather', 'patch')),
      CONSTRAINT dl_workflow_steps_state CHECK (state IN ('pending', 'done', 'failed'))
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS dl_workflow_signals (
      signal_id bigserial PRIMARY KEY,
      run_id uuid NOT NULL REFERENCES dl_workflow_runs(run_id) ON DELETE CASCADE,
      name text NOT NULL,
      payload jsonb,
      consumed_seq int,
      created_at timestamptz NOT NULL DEFAULT now()
    )
    """,
    # the oldest unconsumed signal of a name; also the index the cascade from the run needs
    """
    CREATE INDEX IF NOT EXISTS ix_dl_workflow_signals_run ON dl_workflow_signals (run_id, name, signal_id)
    """,
    """
    CREATE OR REPLACE FUNCTION dl_workflow_wake(p_run uuid) RETURNS void LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        -- the job row first: a hand-back of this run in flight either finishes before this goes on
        -- (and is then made due below) or waits for this commit and sees the wake (dl_workflow_requeue)
        PERFORM 1 FROM dl_jobs WHERE job_id = p_run FOR UPDATE;
        UPDATE dl_workflow_runs SET wakes = wakes + 1 WHERE run_id = p_run;
        -- the notify trigger wakes an idle worker: the row is queued and due now
        UPDATE dl_jobs SET available_at = now()
        WHERE job_id = p_run AND status = 'queued' AND available_at > now();
    END
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION dl_workflow_child_end() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        v_parent uuid;
        v_seq int;
        v_left int;
        v_fast boolean;
    BEGIN
        -- `joined` flips once: a child revived by a manual retry and ending again is not counted again
        UPDATE dl_workflow_runs SET joined = true
        WHERE run_id = NEW.job_id AND parent_run_id IS NOT NULL AND NOT joined
        RETURNING parent_run_id, parent_seq INTO v_parent, v_seq;
        IF v_parent IS NULL THEN
            RETURN NULL;
        END IF;
        UPDATE dl_workflow_steps SET remaining = remaining - 1
        WHERE run_id = v_parent AND seq = v_seq AND kind = 'gather'
        RETURNING remaining, fail_fast INTO v_left, v_fast;
        -- the last end completes the join; a fail-fast gather also looks at the first failure
        IF v_left = 0 OR (v_fast AND NEW.status <> 'succeeded') THEN
            PERFORM dl_workflow_wake(v_parent);
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION dl_workflow_requeue() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        -- a fresh snapshot (VOLATILE plpgsql, READ COMMITTED): sees a wake that committed while
        -- this row's lock was awaited
        IF NEW.available_at > now() AND EXISTS (
                SELECT 1 FROM dl_workflow_runs WHERE run_id = NEW.job_id AND wakes > seen_wakes) THEN
            NEW.available_at := now();
        END IF;
        RETURN NEW;
    END
    $$
    """,
    "DROP TRIGGER IF EXISTS dl_workflow_child_end ON dl_jobs",
    """
    CREATE TRIGGER dl_workflow_child_end AFTER UPDATE OF status ON dl_jobs FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'canceled', 'lost')
          AND OLD.status IN ('queued', 'running') AND starts_with(NEW.task, 'workflow:'))
    EXECUTE FUNCTION dl_workflow_child_end()
    """,
    "DROP TRIGGER IF EXISTS dl_workflow_requeue ON dl_jobs",
    """
    CREATE TRIGGER dl_workflow_requeue BEFORE UPDATE OF status ON dl_jobs FOR EACH ROW
    WHEN (OLD.status = 'running' AND NEW.status = 'queued' AND starts_with(NEW.task, 'workflow:'))
    EXECUTE FUNCTION dl_workflow_requeue()
    """,
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    for statement in (
        "DROP TRIGGER IF EXISTS dl_workflow_requeue ON dl_jobs",
        "DROP TRIGGER IF EXISTS dl_workflow_child_end ON dl_jobs",
        "DROP FUNCTION IF EXISTS dl_workflow_requeue()",
        "DROP FUNCTION IF EXISTS dl_workflow_child_end()",
        "DROP FUNCTION IF EXISTS dl_workflow_wake(uuid)",
        "DROP TABLE IF EXISTS dl_workflow_signals",
        "DROP TABLE IF EXISTS dl_workflow_steps",
        "DROP TABLE IF EXISTS dl_workflow_runs",
    ):
        op.execute(statement)
