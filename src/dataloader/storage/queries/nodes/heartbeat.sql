-- One node's heartbeat and the cluster's failure detector in one statement (the idle cost of a
-- node is this statement every DL_NODE_HEARTBEAT_SEC, whatever the number of observers):
--   beat:     renew this incarnation, only while it is 'live' (alive = 0 tells a node that was
--             declared dead or superseded to stop its observers at once);
--   dead:     any other live/superseded node silent for more than $2 seconds becomes 'dead' — a
--             compare-and-set on heartbeat_at, so racing nodes mark it once;
--   released: the observers of those nodes (and of any dead/stopped node still holding one) go
--             back to 'created' to be claimed elsewhere — or to 'deleted' when a stop was asked.
--             A move does not touch `failures`: a node's death never uses an observer's budget;
--   wake:     one NOTIFY so nodes with spare capacity claim now instead of at their next beat. (released and wake: release_observers.sql)
-- Also returned: the observers of this node whose stop was asked (in case a NOTIFY was missed),
-- in how many seconds the earliest waiting observer this node could run is due (null: none waits;
-- <= 0: now), and whether no observer runs or waits anywhere (then no node's death can strand one,
-- and the node beats at its quiet pace).
-- $1 node_id, $2 dead_after_sec, $3 the kinds this node has code for
WITH beat AS (
    UPDATE dl_nodes SET heartbeat_at = now()
    WHERE node_id = $1 AND state = 'live'
    RETURNING node_id
), dead AS (
    UPDATE dl_nodes SET state = 'dead', stopped_at = now()
    WHERE state IN ('live', 'superseded') AND node_id <> $1
      AND heartbeat_at < now() - make_interval(secs => $2::float8)
    RETURNING node_id, name
), holders AS (
    SELECT node_id, name, 'died' AS fate, 'stopped (its node ' || name || ' died meanwhile)' AS stop_reason FROM dead
    UNION ALL
    SELECT node_id, name, 'died', 'stopped (its node ' || name || ' died meanwhile)'
    FROM dl_nodes WHERE state IN ('dead', 'stopped')
),
-- @include nodes/release_observers
SELECT (SELECT count(*) FROM beat)::int AS alive,
       ARRAY(SELECT name FROM dead) AS dead_nodes,
       (SELECT count(*) FROM released)::int AS released,
       (SELECT count(*) FROM wake)::int AS woke,
       ARRAY(SELECT name FROM dl_observers WHERE node_id = $1 AND desired = 'stop') AS to_stop,
       CASE WHEN EXISTS (SELECT 1 FROM released) THEN 0::float8
            -- clamped to a day either side (CASE keeps NULL: none waits): a hand-written
            -- +-infinity restart_at cannot be subtracted, and one odd row must not fail every
            -- node's heartbeat
            ELSE (SELECT extract(epoch FROM CASE WHEN m < now() - interval '1 day' THEN now() - interval '1 day'
                                                 WHEN m > now() + interval '1 day' THEN now() + interval '1 day'
                                                 ELSE m END - now())::float8
                  FROM (SELECT min(restart_at) AS m FROM dl_observers
                        WHERE state = 'created' AND kind = ANY($3::text[])) soonest)
       END AS next_waiting_in_sec,
       NOT EXISTS (SELECT 1 FROM dl_observers WHERE node_id IS NOT NULL)
           AND NOT EXISTS (SELECT 1 FROM dl_observers WHERE state = 'created') AS no_observers;
