-- A service instance starts: a new incarnation row (a fresh node_id on every start, seed 004's
-- "new id, old name"). A live incarnation of the same name is marked 'superseded' in the same
-- statement, so the registry shows one live incarnation per name at once. Its observers are NOT
-- released here: the old process might still be running them (a partition, not a crash), so they
-- are released like any silent node's, once its heartbeat is older than the dead bound
-- (nodes/heartbeat.sql). Incarnations that ended more than 7 days ago and hold nothing are pruned.
-- $1 node_id, $2 name, $3 host, $4 pid, $5 version, $6 capacity, $7 queues text[], $8 kinds text[],
-- $9 machine (dataloader/machine.py; NULL: unknown)
WITH superseded AS (
    UPDATE dl_nodes SET state = 'superseded', superseded_by = $1
    WHERE name = $2 AND state = 'live'
    RETURNING node_id
), pruned AS (
    DELETE FROM dl_nodes n
    WHERE n.state IN ('dead', 'stopped') AND n.stopped_at < now() - interval '7 days'
      AND NOT EXISTS (SELECT 1 FROM dl_observers o WHERE o.node_id = n.node_id)
    RETURNING n.node_id
), inserted AS (
    INSERT INTO dl_nodes (node_id, name, host, pid, version, capacity, queues, kinds, machine)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
    RETURNING *
)
SELECT i.*, (SELECT count(*) FROM superseded)::int AS superseded,
       (SELECT count(*) FROM pruned)::int AS pruned
FROM inserted i;
