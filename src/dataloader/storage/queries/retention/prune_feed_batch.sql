-- Delete one batch of the processes' event feed older than $1 seconds, from its head: of the
-- oldest $2 rows by seq, those written before the cutoff. Bounded to the head on purpose: a filter
-- on ts alone over the seq order would walk the whole feed when nothing is old. Rows come in seq
-- order at about their ts order, so a head that is young ends the prune; an old row behind a
-- younger one (a long transaction) goes once that one is old too. Only history's notifications go:
-- the events themselves stay in dl_process_events. Returns how many rows were deleted.
WITH head AS (
    SELECT seq, ts FROM dl_process_feed ORDER BY seq LIMIT $2
), doomed AS (
    SELECT f.seq
    FROM dl_process_feed f JOIN head h USING (seq)
    WHERE h.ts < now() - make_interval(secs => $1::float8)
    FOR UPDATE OF f SKIP LOCKED
), gone AS (
    DELETE FROM dl_process_feed f USING doomed d WHERE f.seq = d.seq RETURNING 1
)
SELECT count(*)::bigint AS deleted FROM gone;
