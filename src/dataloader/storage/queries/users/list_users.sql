-- Every user by name (a team's people: tens, not millions, so no paging).
-- No parameters.
SELECT name, role, disabled, created_at, last_login_at FROM dl_users ORDER BY name;
