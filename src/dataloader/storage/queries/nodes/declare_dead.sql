-- Nodes found dead by a node on their machine (their pid no longer runs): 'dead' now, as the
-- heartbeat's failure detector would declare them after the dead bound; their observers are
-- released by the next heartbeat of any node (nodes/heartbeat.sql). $1 node ids.
UPDATE dl_nodes SET state = 'dead', stopped_at = now()
WHERE node_id = ANY ($1::uuid[]) AND state IN ('live', 'superseded')
RETURNING node_id, name
