"""API tokens for machines: `dl_api_tokens`.

Why: DL_API_TOKEN is one secret that can do everything; a CI system that only enqueues, a
dashboard that only reads and an on-call script that retries each want a token of their own, with
a scope, an expiry, and a revocation that holds on every node (docs/security.md "Tokens and
scopes"). The state must be the database's, like console sessions (0028): any replica must refuse
a token another one revoked.

What: one row per token ever created. `token_hash` is the SHA-256 of the secret (the secret is
shown once and never stored: a read of this table authenticates nobody; model/api_token.py says
why SHA-256 and not argon2); the guard finds a token by it (unique index). `scopes` holds
model.principal.Scope values. A revoked row is kept (`revoked_at`), so "who had access when" stays
answerable and a replayed revoked token is known as such; a name is unique only among tokens not
revoked (`ux_dl_api_tokens_live_name`, which is also the index of "does any token exist", the
question that closes an API without DL_API_TOKEN). `last_used_at` is written at most once a minute
per token (queries/tokens/authenticate.sql).

Revision ID: 0042_api_tokens
Revises: 0041_users
"""

from alembic import op

revision = "0042_api_tokens"
down_revision = "0041_users"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_api_tokens (
            id uuid PRIMARY KEY,
            name text NOT NULL,
            token_hash bytea NOT NULL,
            scopes text[] NOT NULL CHECK (cardinality(scopes) > 0),
            created_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz NOT NULL,
            revoked_at timestamptz,
            last_used_at timestamptz,
            created_by text NOT NULL
        )
    """)
    op.execute("CREATE UNIQUE INDEX IF NOT EXISTS ux_dl_api_tokens_hash ON dl_api_tokens(token_hash)")
    op.execute("CREATE UNIQUE INDEX IF NOT EXISTS ux_dl_api_tokens_live_name ON dl_api_tokens(name) "
               "WHERE revoked_at IS NULL")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dl_api_tokens")
