-- Whether namespace $1's feed has committed rows after the cursor ($2 xid as text, $3 seq) that
-- are not served yet because an older transaction is still running: a follower re-reads soon
-- instead of waiting for the next notification. Same index as read_feed.sql.
SELECT EXISTS (
    SELECT 1 FROM dl_process_feed
    WHERE ns = $1 AND (xid, seq) > ($2::text::xid8, $3::bigint)
      AND xid >= pg_snapshot_xmin(pg_current_snapshot())
) AS held_back
