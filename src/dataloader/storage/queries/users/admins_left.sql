-- A part of users/set_role, set_disabled and delete_user (where they say `-- @include users/admins_left`):
-- `locked_users`, the user $1 and the enabled admins, their rows locked for this statement's
-- transaction in name order, and `admins_left`, the enabled admins other than $1 among them.
-- Two admins demoting (or disabling, deleting) each other at once: both lock in the same order, so
-- the second waits on the first's lock (never each on the other's: locking its own row first, then
-- the other's, made a deadlock), then re-reads the first's row, no longer an admin, and finds nobody
-- left. A statement that includes this fragment reads its target from `locked_users` (taking no
-- lock of its own out of that order) and refuses its change when `admins_left` is empty and $1 is
-- itself an enabled admin.
locked_users AS MATERIALIZED (
    SELECT name, role, disabled FROM dl_users
    WHERE name = $1 OR (role = 'admin' AND NOT disabled)
    ORDER BY name
    FOR UPDATE
), admins_left AS (
    SELECT name FROM locked_users
    WHERE role = 'admin' AND NOT disabled AND name <> $1
)