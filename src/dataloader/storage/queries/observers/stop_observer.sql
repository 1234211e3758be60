-- Stop by name. Waiting (or failed) → 'deleted' at once; running → 'on_deleting' and a NOTIFY to
-- the node holding it ('stop:<node_id>:<name>'), which stops it cooperatively and writes
-- 'deleted' (observers/finish_stopped.sql). `desired = 'stop'` is what makes a stop stick while
-- the observer moves between nodes: a release turns it 'deleted', never 'created', and the claim
-- takes only 'created' rows. Repeating a stop changes nothing.
-- $1 name
WITH updated AS (
    UPDATE dl_observers o
    SET desired = 'stop', stop_requested_at = COALESCE(o.stop_requested_at, now()), updated_at = now(),
        state = CASE WHEN o.state IN ('created', 'failed') THEN 'deleted'
                     WHEN o.state = 'processing' THEN 'on_deleting' ELSE o.state END,
        stopped_at = CASE WHEN o.state IN ('created', 'failed') THEN now() ELSE o.stopped_at END,
        reason = CASE WHEN o.state IN ('created', 'failed') THEN 'stopped'
                      WHEN o.state = 'processing' THEN 'stop requested' ELSE o.reason END
    WHERE o.name = $1
    RETURNING o.*
), signal AS (
    SELECT pg_notify('dl_observers', 'stop:' || u.node_id::text || ':' || u.name) AS sent
    FROM updated u WHERE u.node_id IS NOT NULL
)
SELECT u.*, (SELECT name FROM dl_nodes WHERE node_id = u.node_id) AS node_name,
       (SELECT count(*) FROM signal)::int AS signaled
FROM updated u;
