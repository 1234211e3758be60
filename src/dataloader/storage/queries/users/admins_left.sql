-- A part of users/set_role, set_disabled and delete_user (where they say `-- @include users/admins_left`):
-- the enabled admins other than $1, their rows locked for this statement's transaction.
-- Two admins demoting (or disabling, deleting) each other at once: the second waits on the lock,
-- then re-reads the first's row, no longer an admin, and finds nobody left. A statement that
-- includes this fragment refuses its change when `(SELECT count(*) FROM admins_left) = 0` and $1
-- is itself an enabled admin.
admins_left AS (
    SELECT name FROM dl_users
    WHERE role = 'admin' AND NOT disabled AND name <> $1
    FOR UPDATE
)
