"""Fan-in for plain chains: a pipeline returns `Then(*stages, join=Stage(...))` and the join stage
runs once, after every one of those stages has ended, with their outcomes as its `inputs`.

- `dl_chain_joins`: one row per join stage; `join_job_id` IS the join's `dl_jobs` row, inserted
  with the members by the parent's finish (same statement) and held far in the future until the
  join fires; `remaining` counts the members not yet ended; `delay_sec` is the join stage's own
  delay, applied when it fires.
- `dl_chain_join_members`: one row per member stage (`position` in the `Then`), `joined` once its
  end was counted. No foreign key to the member's job: a delete of an unfinished member must still
  find its row to count it (the cascade would remove it first), and retention deletes finished
  members long after they were counted. The rows go with their join (ON DELETE CASCADE).

Every way a member ends is an UPDATE of its status to a terminal one (its finish, a cancel, the
reaper's `lost`, a bulk operation) or the DELETE of an unfinished row (an operator's delete): two
triggers count each member once (`joined` flips once), in the transaction that ends it, whoever
ends it. A member revived by a manual retry after it was counted is not counted again: the join
fired once, with the outcome the member had then. The WHEN clauses let every job that is not a
chain stage (no `parent_job_id`) pass without calling anything.

When the count reaches zero the join's job is made due (after its own delay) with
`args.inputs` = every member's job_id, task, status (`deleted` for a deleted one), result and
error, in the `Then`'s order (a result over 16 KiB is left out, `result_omitted` true: a thousand
large results must not make one job's args too large to store, or fail the last member's finish), and a `joined` row in its journal, in that same transaction.

Revision ID: 0032_chain_joins
Revises: 0031_workflow_runs_list
"""

from alembic import op

revision = "0032_chain_joins"
down_revision = "0031_workflow_runs_list"
branch_labels = None
depends_on = None

STATEMENTS = [
    """
    CREATE TABLE IF NOT EXISTS dl_chain_joins (
      join_job_id uuid PRIMARY KEY REFERENCES dl_jobs(job_id) ON DELETE CASCADE,
      remaining int NOT NULL,
      members int NOT NULL,
      delay_sec float8 NOT NULL DEFAULT 0,
      fired_at timestamptz,
      created_at timestamptz NOT NULL DEFAULT now()
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS dl_chain_join_members (
      job_id uuid PRIMARY KEY,
      join_job_id uuid NOT NULL REFERENCES dl_chain_joins(join_job_id) ON DELETE CASCADE,
      position int NOT NULL,
      joined boolean NOT NULL DEFAULT false,
      ended_status text
    )
    """,
    "CREATE INDEX IF NOT EXISTS ix_dl_chain_join_members_join ON dl_chain_join_members (join_job_id, position)",
    """
    CREATE OR REPLACE FUNCTION dl_chain_join_count(p_member uuid, p_status text) RETURNS void
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        v_join uuid;
        v_left int;
        v_delay float8;
    BEGIN
        UPDATE dl_chain_join_members SET joined = true, ended_status = p_status
        WHERE job_id = p_member AND NOT joined
        RETURNING join_job_id INTO v_join;
        IF v_join IS NULL THEN
            RETURN;  -- not a member, or counted already (a revived member ending again)
        END IF;
        -- the row lock orders concurrent ends: the one that reaches zero runs after every other
        -- member's end committed, and its fresh snapshot below sees them all
        UPDATE dl_chain_joins SET remaining = remaining - 1,
                                  fired_at = CASE WHEN remaining = 1 THEN now() END
        WHERE join_job_id = v_join
        RETURNING remaining, delay_sec INTO v_left, v_delay;
        IF v_left <> 0 THEN
            RETURN;
        END IF;
        WITH inputs AS (
            SELECT coalesce(jsonb_agg(jsonb_build_object(
                       'job_id', m.job_id, 'task', j.task,
                       'status', coalesce(j.status::text, m.ended_status),
                       'result', CASE WHEN octet_length(j.result::text) <= 16384 THEN j.result END,
                       'result_omitted', octet_length(j.result::text) > 16384,
                       'error', j.error) ORDER BY m.position), '[]'::jsonb) AS list
            FROM dl_chain_join_members m LEFT JOIN dl_jobs j ON j.job_id = m.job_id
            WHERE m.join_job_id = v_join
        ), fired AS (
            -- the notify trigger wakes an idle worker when the row becomes due
            UPDATE dl_jobs SET available_at = now() + make_interval(secs => v_delay),
                               args = args || jsonb_build_object('inputs', (SELECT list FROM inputs))
            WHERE job_id = v_join AND status = 'queued'
            RETURNING job_id, queue
        )
        INSERT INTO dl_job_events (job_id, queue, kind, payload)
        SELECT job_id, queue, 'joined', jsonb_build_object('members', (SELECT count(*) FROM dl_chain_join_members
                                                                      WHERE join_job_id = v_join))
        FROM fired;
    END
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION dl_chain_join_member_end() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            PERFORM dl_chain_join_count(OLD.job_id, 'deleted');
        ELSE
            PERFORM dl_chain_join_count(NEW.job_id, NEW.status::text);
        END IF;
        RETURN NULL;
    END
    $$
    """,
    "DROP TRIGGER IF EXISTS dl_chain_join_member_end ON dl_jobs",
    """
    CREATE TRIGGER dl_chain_join_member_end AFTER UPDATE OF status ON dl_jobs FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'canceled', 'lost')
          AND OLD.status IN ('queued', 'running') AND NEW.parent_job_id IS NOT NULL)
    EXECUTE FUNCTION dl_chain_join_member_end()
    """,
    "DROP TRIGGER IF EXISTS dl_chain_join_member_deleted ON dl_jobs",
    """
    CREATE TRIGGER dl_chain_join_member_deleted AFTER DELETE ON dl_jobs FOR EACH ROW
    WHEN (OLD.status IN ('queued', 'running') AND OLD.parent_job_id IS NOT NULL)
    EXECUTE FUNCTION dl_chain_join_member_end()
    """,
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    for statement in (
        "DROP TRIGGER IF EXISTS dl_chain_join_member_deleted ON dl_jobs",
        "DROP TRIGGER IF EXISTS dl_chain_join_member_end ON dl_jobs",
        "DROP FUNCTION IF EXISTS dl_chain_join_member_end()",
        "DROP FUNCTION IF EXISTS dl_chain_join_count(uuid, text)",
        "DROP TABLE IF EXISTS dl_chain_join_members",
        "DROP TABLE IF EXISTS dl_chain_joins",
    ):
        op.execute(statement)
