-- A new console user (docs/security.md); nothing when the name is taken (the caller says so).
-- $1 name, $2 password_hash (argon2id PHC string), $3 role
INSERT INTO dl_users (name, password_hash, role)
VALUES ($1, $2, $3)
ON CONFLICT (name) DO NOTHING
RETURNING name, role, disabled, created_at, last_login_at;
