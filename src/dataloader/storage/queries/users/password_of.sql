-- What sign-in checks a password against: the user's hash, and whether they may sign in at all.
-- $1 name
SELECT password_hash, disabled FROM dl_users WHERE name = $1;
