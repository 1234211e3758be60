-- A node's observers given back (heartbeat.sql: of the nodes found dead; deregister_node.sql: of
-- the node that stops), included after the including statement's `holders` CTE (node_id, name,
-- fate: 'died' or 'stopped', stop_reason: the reason an observer asked to stop ends with). An
-- observer asked to stop is deleted; any other goes back to 'created' for a live node to claim,
-- counted as a move. Each release wakes the nodes' claims with one NOTIFY on dl_observers.
-- No parameters.
released AS (
    UPDATE dl_observers o
    SET state = CASE WHEN o.desired = 'stop' THEN 'deleted' ELSE 'created' END,
        node_id = NULL, last_node_id = o.node_id, restart_at = now(), updated_at = now(),
        moves = o.moves + (o.desired = 'run')::int,
        stopped_at = CASE WHEN o.desired = 'stop' THEN now() END,
        reason = CASE WHEN o.desired = 'stop' THEN h.stop_reason
                      ELSE 'node ' || h.name || ' ' || h.fate || '; waiting for a live node' END
    FROM holders h
    WHERE o.node_id = h.node_id
    RETURNING o.name
), wake AS (
    SELECT pg_notify('dl_observers', 'wake') AS sent WHERE EXISTS (SELECT 1 FROM released)
)
