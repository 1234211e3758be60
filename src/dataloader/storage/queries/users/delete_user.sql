-- Delete a user; their sessions go with them (ON DELETE CASCADE, migration 0041). Refused
-- (`refused`) when they are the last enabled admin and other users remain (users/admins_left.sql);
-- the only user may be deleted: that is the set-up without users again (docs/security.md).
-- $1 name
WITH
-- @include users/admins_left
, target AS (
    -- every row of locked_users is read here, so all of them are locked, in their order
    SELECT name, role, disabled FROM locked_users WHERE name = $1
), refused AS (
    SELECT 1 FROM target
    WHERE target.role = 'admin' AND NOT target.disabled AND NOT EXISTS (SELECT 1 FROM admins_left)
      AND EXISTS (SELECT 1 FROM dl_users WHERE name <> $1)
), deleted AS (
    DELETE FROM dl_users u USING target
    WHERE u.name = target.name AND NOT EXISTS (SELECT 1 FROM refused)
    RETURNING u.name
)
SELECT (SELECT count(*) FROM target) > 0 AS found, EXISTS (SELECT 1 FROM refused) AS refused,
       EXISTS (SELECT 1 FROM deleted) AS deleted;
