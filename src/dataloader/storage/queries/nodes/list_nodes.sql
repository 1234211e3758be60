-- The registry for GET /api/v1/nodes: live (and superseded, not yet dead) incarnations, or every
-- incarnation with $1, newest first per name; `running` is the node's observer load now.
-- $1 include_ended boolean, $2 limit
SELECT n.*, (SELECT count(*) FROM dl_observers o WHERE o.node_id = n.node_id)::int AS running,
       -- clamped: a hand-written +-infinity heartbeat cannot be subtracted (and JSON has no infinity)
       extract(epoch FROM now() - LEAST(GREATEST(n.heartbeat_at, '1970-01-01'::timestamptz),
                                        '9999-01-01'::timestamptz))::float8 AS heartbeat_age_sec
FROM dl_nodes n
WHERE $1::boolean OR n.state IN ('live', 'superseded')
ORDER BY n.name, n.started_at DESC
LIMIT $2;
