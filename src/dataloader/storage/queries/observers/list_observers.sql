-- Observers by name, with the node holding each. Filters are optional (null: any).
-- $1 state, $2 kind, $3 node name, $4 after name (keyset page), $5 limit
SELECT o.*, n.name AS node_name
FROM dl_observers o LEFT JOIN dl_nodes n ON n.node_id = o.node_id
WHERE ($1::text IS NULL OR o.state = $1)
  AND ($2::text IS NULL OR o.kind = $2)
  AND ($3::text IS NULL OR n.name = $3)
  AND ($4::text IS NULL OR o.name > $4)
ORDER BY o.name
LIMIT $5;
