-- A stopped observer ended on its node: 'deleted', held by nobody. Fenced on (name, epoch, node):
-- a node that lost the observer meanwhile writes nothing.
-- $1 name, $2 epoch, $3 node_id
UPDATE dl_observers
SET state = 'deleted', node_id = NULL, last_node_id = node_id, stopped_at = now(), updated_at = now(),
    reason = 'stopped'
WHERE name = $1 AND epoch = $2 AND node_id = $3
RETURNING name;
