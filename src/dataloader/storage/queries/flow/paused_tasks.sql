-- Every task with flow state (0025) and whether it is paused now, with since when: for the
-- dl_task_paused metric (read at scrape time: every node shows the database's state) and for the
-- queues' listing, which shows each queue's paused tasks. Few rows: one per task ever paused.
-- No parameters.
SELECT queue, task, paused, paused_at FROM dl_task_flow ORDER BY queue, task;
