-- A page of namespace $1's feed after the cursor ($2 xid as text, $3 seq), at most $4 rows, in
-- (xid, seq) order. Only rows whose transaction is older than every transaction still running
-- (xid < the snapshot's xmin) are served: every such transaction has ended, so no row can still
-- commit behind the cursor (a later commit always has an xid >= xmin, which sorts after any
-- cursor served so far), and a rolled-back row never exists to be read. Served by
-- ix_dl_process_feed_cursor (ns, xid, seq).
SELECT seq, xid::text AS xid, ns, process_id, kind, event_id, task_id, ts, payload, metadata
FROM dl_process_feed
WHERE ns = $1
  AND (xid, seq) > ($2::text::xid8, $3::bigint)
  AND xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY xid, seq
LIMIT $4
