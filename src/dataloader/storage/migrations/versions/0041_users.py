"""Console users with roles: `dl_users`, and the session of a user (docs/security.md).

Why: the console knew one shared token; a team needs people, each with a role (viewer, operator,
admin: model/principal.py), who sign in with their own password and can be disabled or demoted
without changing anybody else's access.

What:
- `dl_users`: one row per person. `password_hash` is argon2id's PHC string (its parameters and
  salt inside it), never the password; `role` one of the three; `disabled` keeps the row (and the
  name taken) while refusing sign-in; `last_login_at` for the admin's "who still uses this".
- `dl_console_sessions.user_name`: the user a session signs in (NULL: a DL_API_TOKEN session, as
  before, whose `token_mac` is then required). The role is NOT copied into the session: every
  request joins the user's row (one primary-key look-up beside the session's), so a role change or
  a disable holds from the next request. ON DELETE CASCADE: deleting a user ends their sessions.

A new table and a nullable column: catalog-only, no rewrite of the sessions table.

Revision ID: 0041_users
Revises: 0040_storage_samples
"""

from alembic import op

revision = "0041_users"
down_revision = "0040_storage_samples"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_users (
            name text PRIMARY KEY,
            password_hash text NOT NULL,
            role text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
            disabled boolean NOT NULL DEFAULT false,
            created_at timestamptz NOT NULL DEFAULT now(),
            last_login_at timestamptz
        )
    """)
    op.execute("ALTER TABLE dl_console_sessions ADD COLUMN IF NOT EXISTS user_name text "
               "REFERENCES dl_users(name) ON DELETE CASCADE")
    op.execute("ALTER TABLE dl_console_sessions ALTER COLUMN token_mac DROP NOT NULL")
    op.execute("ALTER TABLE dl_console_sessions ADD CONSTRAINT dl_console_sessions_owner_check "
               "CHECK (user_name IS NOT NULL OR token_mac IS NOT NULL)")
    # A user's sessions are found by name (sign them out on disable or a new password; the cascade).
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_console_sessions_user ON dl_console_sessions(user_name) "
               "WHERE user_name IS NOT NULL")


def downgrade() -> None:
    op.execute("DELETE FROM dl_console_sessions WHERE user_name IS NOT NULL")
    op.execute("ALTER TABLE dl_console_sessions DROP CONSTRAINT IF EXISTS dl_console_sessions_owner_check")
    op.execute("ALTER TABLE dl_console_sessions ALTER COLUMN token_mac SET NOT NULL")
    op.execute("DROP INDEX IF EXISTS ix_dl_console_sessions_user")
    op.execute("ALTER TABLE dl_console_sessions DROP COLUMN IF EXISTS user_name")
    op.execute("DROP TABLE IF EXISTS dl_users")
