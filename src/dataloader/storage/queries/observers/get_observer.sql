-- One observer with the name of the node holding it (null while waiting).
-- $1 name
SELECT o.*, n.name AS node_name
FROM dl_observers o LEFT JOIN dl_nodes n ON n.node_id = o.node_id
WHERE o.name = $1;
