-- Create a process in status 'init' (PrepareInit). $1 ns, $2 id. Nothing when the id is taken in
-- the namespace: the caller tells "exists" from its idempotent replay by the task's key.
INSERT INTO dl_processes (ns, id, status)
VALUES ($1, $2, 'init')
ON CONFLICT (ns, id) DO NOTHING
RETURNING ns, id
