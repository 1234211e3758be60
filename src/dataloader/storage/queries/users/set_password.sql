-- A user's new password (its argon2id hash). Every session of theirs ends in the same statement:
-- whoever knew the old password and signed in with it is out.
-- $1 name, $2 password_hash
WITH changed AS (
    UPDATE dl_users SET password_hash = $2 WHERE name = $1
    RETURNING name, role, disabled, created_at, last_login_at
), ended AS (
    DELETE FROM dl_console_sessions s USING changed WHERE s.user_name = changed.name
    RETURNING 1
)
SELECT changed.*, (SELECT count(*) FROM ended)::int AS sessions_ended FROM changed;
