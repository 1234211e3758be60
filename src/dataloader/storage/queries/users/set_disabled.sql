-- Disable or enable a user. Disabling ends every session of theirs in the same statement (a
-- re-enabled user signs in again; no old cookie comes back to life) and is refused (`refused`)
-- when they are the last enabled admin (users/admins_left.sql).
-- $1 name, $2 disabled (boolean)
WITH
-- @include users/admins_left
, target AS (
    -- every row of locked_users is read here, so all of them are locked, in their order
    SELECT name, role, disabled FROM locked_users WHERE name = $1
), refused AS (
    SELECT 1 FROM target
    WHERE $2 AND target.role = 'admin' AND NOT target.disabled AND NOT EXISTS (SELECT 1 FROM admins_left)
), changed AS (
    UPDATE dl_users u SET disabled = $2
    FROM target
    WHERE u.name = target.name AND NOT EXISTS (SELECT 1 FROM refused)
    RETURNING u.name, u.role, u.disabled, u.created_at, u.last_login_at
), ended AS (
    DELETE FROM dl_console_sessions s
    USING changed
    WHERE $2 AND s.user_name = changed.name
    RETURNING 1
)
SELECT (SELECT count(*) FROM target) > 0 AS found, EXISTS (SELECT 1 FROM refused) AS refused, changed.*,
       (SELECT count(*) FROM ended)::int AS sessions_ended
FROM (VALUES (1)) AS one (x) LEFT JOIN changed ON true;
