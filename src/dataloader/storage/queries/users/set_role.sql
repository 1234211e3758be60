-- A user's new role. Refused (no row updated; `refused` true) when it would demote the last
-- enabled admin (users/admins_left.sql). The user's sessions stay: each request reads the role
-- anew (console/session_alive.sql), so the change holds from the next request.
-- $1 name, $2 role
WITH
-- @include users/admins_left
, target AS (
    -- every row of locked_users is read here, so all of them are locked, in their order
    SELECT name, role, disabled FROM locked_users WHERE name = $1
), refused AS (
    SELECT 1 FROM target
    WHERE target.role = 'admin' AND NOT target.disabled AND $2 <> 'admin'
      AND NOT EXISTS (SELECT 1 FROM admins_left)
), changed AS (
    UPDATE dl_users u SET role = $2
    FROM target
    WHERE u.name = target.name AND NOT EXISTS (SELECT 1 FROM refused)
    RETURNING u.name, u.role, u.disabled, u.created_at, u.last_login_at
)
SELECT (SELECT count(*) FROM target) > 0 AS found, EXISTS (SELECT 1 FROM refused) AS refused, changed.*
FROM (VALUES (1)) AS one (x) LEFT JOIN changed ON true;
