-- One user as the faces show it (never the hash).
-- $1 name
SELECT name, role, disabled, created_at, last_login_at FROM dl_users WHERE name = $1;
