-- The nodes that may still run (live or superseded) under the names of this machine's nodes, for a
-- node's look at which of them died (jobs/reaper.py): `here` says whether that row was written in
-- this machine's process namespace, where its pid can be asked. A name with a row elsewhere is
-- never judged from here. $1 machine (dataloader/machine.py).
SELECT node_id, name, pid, started_at, machine IS NOT DISTINCT FROM $1 AS here
FROM dl_nodes
WHERE state IN ('live', 'superseded')
  AND name = ANY (ARRAY(SELECT name FROM dl_nodes WHERE machine = $1 AND state IN ('live', 'superseded')))
