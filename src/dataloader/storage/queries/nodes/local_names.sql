-- The nodes that may still run under the names of this machine's nodes, for a node's look at which
-- of them died (jobs/reaper.py): live or superseded ones, and those declared dead in the last hour
-- (by this look or by the heartbeat's failure detector: a job whose session outlived the first look
-- is found on a later one; a pid that runs is never judged dead). `here` says whether that row was
-- written in this machine's process namespace, where its pid can be asked; a name with a row
-- elsewhere is never judged from here. $1 machine (dataloader/machine.py).
WITH maybe_running AS (
    SELECT node_id, name, pid, started_at, machine FROM dl_nodes
    WHERE state IN ('live', 'superseded') OR (state = 'dead' AND stopped_at > now() - interval '1 hour')
)
SELECT node_id, name, pid, started_at, machine IS NOT DISTINCT FROM $1 AS here
FROM maybe_running
WHERE name = ANY (ARRAY(SELECT name FROM maybe_running WHERE machine = $1))
