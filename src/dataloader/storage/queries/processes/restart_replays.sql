-- The calls a restart runs again after the task it goes back to ($3): the process's `call` tasks
-- that finished after it, in the order they ran (one task of a process runs at a time, so their
-- finish times are that order). Failed calls changed nothing and are not run again; timers are
-- not either (the restored timer fires anew). $1 ns, $2 id.
SELECT t.task_id, t.task_type, t.args, t.history_range
FROM dl_process_tasks t
JOIN dl_process_tasks r ON r.task_id = $3
WHERE t.ns = $1 AND t.process_id = $2 AND t.task_type = 'call' AND t.status = 'finished'
  AND t.task_id <> r.task_id
  AND (t.finished_at, t.task_id) > (COALESCE(r.finished_at, r.created_at), r.task_id)
ORDER BY t.finished_at, t.task_id
