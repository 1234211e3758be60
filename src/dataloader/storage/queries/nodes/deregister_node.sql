-- A clean stop: the node has already stopped its observers, so they are handed back at once
-- ('created', or 'deleted' when their stop was asked) and the other nodes are woken to claim them.
-- $1 node_id
WITH node AS (
    UPDATE dl_nodes SET state = 'stopped', stopped_at = now()
    WHERE node_id = $1 AND state IN ('live', 'superseded')
    RETURNING node_id, name
), holders AS (
    SELECT node_id, name, 'stopped' AS fate, 'stopped' AS stop_reason FROM node
),
-- @include nodes/release_observers
SELECT (SELECT count(*) FROM node)::int AS stopped,
       (SELECT count(*) FROM released)::int AS released,
       (SELECT count(*) FROM wake)::int AS woke;
