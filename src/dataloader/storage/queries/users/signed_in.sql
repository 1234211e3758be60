-- A successful sign-in: when it happened (an admin's "who still uses this"), and the hash again
-- when the one stored was made with weaker parameters than this node's (argon2's needs-rehash;
-- NULL keeps the stored one). Only while still enabled: a disable that raced the password check wins.
-- $1 name, $2 new password_hash or NULL
UPDATE dl_users SET last_login_at = now(), password_hash = coalesce($2, password_hash)
WHERE name = $1 AND NOT disabled
RETURNING role;
