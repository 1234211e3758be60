-- Nodes the registry counts as alive (dl_nodes{state}): `live`, and `superseded` (a restarted node
-- whose older incarnation has not stopped yet). Walks the partial index ix_dl_nodes_live; dead and
-- stopped rows are history and are not counted (deaths are dl_nodes_marked_dead_total). No
-- parameters.
SELECT state, count(*)::int AS nodes
FROM dl_nodes
WHERE state IN ('live', 'superseded')
GROUP BY state
ORDER BY state;
