-- A node with spare capacity takes waiting observers of kinds it has code for: 'processing' on
-- this node, `epoch` + 1 (the fencing token of this run). Only a 'live' node claims (its row is
-- read FOR SHARE, so it cannot be marked dead halfway through the claim). The caller has checked
-- that its own last successful heartbeat is recent (observers/runner.py), which is what keeps a
-- node that was cut off from claiming what the others are about to take.
-- $1 node_id, $2 how many at most, $3 kinds text[]
WITH me AS (
    SELECT node_id FROM dl_nodes WHERE node_id = $1 AND state = 'live' FOR SHARE
), picked AS (
    SELECT o.name FROM dl_observers o
    WHERE o.state = 'created' AND o.restart_at <= now() AND o.kind = ANY($3::text[])
      AND EXISTS (SELECT 1 FROM me)
    ORDER BY o.restart_at, o.name
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE dl_observers o
SET state = 'processing', node_id = $1, epoch = o.epoch + 1, started_at = now(), updated_at = now(),
    reason = NULL
FROM picked p
WHERE o.name = p.name
RETURNING o.name, o.kind, o.args, o.epoch, o.failures, o.max_restarts, o.checkpoint, o.moves;
