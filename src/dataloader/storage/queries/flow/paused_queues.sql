-- Every queue with flow state and whether it is paused now, for the dl_queue_paused metric (read
-- at scrape time: every node's /metrics shows the database's state, not a cache). A queue that
-- was paused and resumed keeps its row, so it reads 0 rather than vanishing. No parameters.
SELECT queue, paused FROM dl_queue_flow ORDER BY queue;
