"""Console sessions held by the database: `dl_console_sessions`.

Why: the console's cookie was a fixed HMAC of DL_API_TOKEN, the same for every login; it never
expired and survived "Sign out" (a copy taken before, replayed later, still paused a queue). A
session that can end needs state, and it must be the database's: every node of the service (any
number of replicas behind one address) must refuse a cookie another node signed out, and a restart
must not forget a sign-out.

What: one row per signed-in browser. `session_hash` is the SHA-256 of the cookie's random secret
(the secret itself is never stored: a read of this table signs nobody in); `token_mac` is an HMAC
of a label under the DL_API_TOKEN the browser signed in with, so changing the token still signs
every browser out; `expires_at` is set at sign-in from DL_UI_SESSION_TTL on the database's clock
(the same on every node). Sign-out deletes the row; a sign-in deletes the browser's previous
session (rotation) and every expired row (`ix_dl_console_sessions_expires`).

Revision ID: 0028_console_sessions
Revises: 0027_task_limits
"""

from alembic import op

revision = "0028_console_sessions"
down_revision = "0027_task_limits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_console_sessions (
            session_hash bytea PRIMARY KEY,
            token_mac text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz NOT NULL,
            client text
        )
    """)
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_console_sessions_expires ON dl_console_sessions(expires_at)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dl_console_sessions")
