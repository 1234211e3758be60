-- A single sign-on (docs/security.md): the provider vouched for the person, so the user is made on
-- their first sign-in, and their role is the one the provider's claims map to on every sign-in
-- (the provider's groups are the source of truth). The stored hash is a value no password
-- verifies ('!sso': not a PHC string), so such a user signs in only through the provider until an
-- admin sets a password. A disabled user stays disabled and gets no row back (refused).
-- $1 name, $2 role
INSERT INTO dl_users AS u (name, password_hash, role, last_login_at)
VALUES ($1, '!sso', $2, now())
ON CONFLICT (name) DO UPDATE SET role = EXCLUDED.role, last_login_at = now()
WHERE NOT u.disabled
RETURNING name, role, disabled, created_at, last_login_at;
