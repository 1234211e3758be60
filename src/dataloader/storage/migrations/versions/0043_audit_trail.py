"""The audit trail (docs/security.md "Audit trail", DESIGN.md promise 14): `dl_audit`, one row per
change a person, a token, the CLI or a library caller made (and per refusal worth keeping), written
in the transaction of the change it records.

- `id uuid`: time-ordered (UUID v7, made by the writer), so (ts, id) orders the rows across shards
  for the keyset cursor; `ts` is the database's clock (the change's transaction time).
- `actor` is the principal's label (`user:alice`, `token:ci`, `cli:root`), `actor_kind` its kind,
  `address` where the request came from when a face knows it, `face` python/http/cli/console.
- `target_kind`/`target_id`: what was changed (`job`/<uuid>, `queue`/`load`, `schedule`/<name>).
- `details jsonb`: the inputs that matter (never secrets or payloads); `outcome` ok | refused with
  the dataloader error code.

Indexes serve the searches the faces offer, each newest first: by time alone, by actor, by action
and by target. A new table: nothing of the 003 schema changes.

Revision ID: 0043_audit_trail
Revises: 0042_api_tokens
"""

from alembic import op

revision = "0043_audit_trail"
down_revision = "0042_api_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_audit (
            id uuid PRIMARY KEY,
            ts timestamptz NOT NULL DEFAULT now(),
            actor text NOT NULL,
            actor_kind text NOT NULL,
            address text,
            action text NOT NULL,
            target_kind text,
            target_id text,
            details jsonb NOT NULL DEFAULT '{}'::jsonb,
            outcome text NOT NULL CHECK (outcome IN ('ok', 'refused')),
            error_code text,
            face text CHECK (face IN ('python', 'http', 'cli', 'console')),
            CHECK ((outcome = 'refused') = (error_code IS NOT NULL))
        )""")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_audit_ts ON dl_audit (ts DESC, id DESC)")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_audit_actor ON dl_audit (actor text_pattern_ops, ts DESC, id DESC)")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_audit_action ON dl_audit (action text_pattern_ops, ts DESC, id DESC)")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_audit_target ON dl_audit (target_kind, target_id, ts DESC, id DESC)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dl_audit")
