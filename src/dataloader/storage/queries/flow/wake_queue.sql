-- Wake queue $1's workers on every node (NOTIFY dl_jobs with the queue's name, the enqueue's
-- wake-up): sent by a worker after it finished jobs of a queue with a global concurrency limit, so
-- a worker on another node that found the queue at its limit claims the freed slot at once instead
-- of at its fallback poll. Only for limited queues: an unlimited queue's finish sends nothing.
-- $1 queue.
SELECT pg_notify('dl_jobs', $1);
