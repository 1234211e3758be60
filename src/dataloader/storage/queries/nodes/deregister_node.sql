-- A clean stop: the node has already stopped its observers, so they are handed back at once
-- ('created', or 'deleted' when their stop was asked) and the other nodes are woken to claim them.
-- $1 node_id
WITH node AS (
    UPDATE dl_nodes SET state = 'stopped', stopped_at = now()
    WHERE node_id = $1 AND state IN ('live', 'superseded')
    RETURNING node_id, name
), released AS (
    UPDATE dl_observers o
    SET state = CASE WHEN o.desired = 'stop' THEN 'deleted' ELSE 'created' END,
        node_id = NULL, last_node_id = o.node_id, restart_at = now(), updated_at = now(),
        moves = o.moves + (o.desired = 'run')::int,
        stopped_at = CASE WHEN o.desired = 'stop' THEN now() END,
        reason = CASE WHEN o.desired = 'stop' THEN 'stopped'
                      ELSE 'node ' || n.name || ' stopped; waiting for a live node' END
    FROM node n
    WHERE o.node_id = n.node_id
    RETURNING o.name
), wake AS (
    SELECT pg_notify('dl_observers', 'wake') AS sent WHERE EXISTS (SELECT 1 FROM released)
)
SELECT (SELECT count(*) FROM node)::int AS stopped,
       (SELECT count(*) FROM released)::int AS released,
       (SELECT count(*) FROM wake)::int AS woke;
