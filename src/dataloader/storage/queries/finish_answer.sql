-- Each finish request's answer (included after finish_release_keys.sql): its job's status and
-- available_at as the finish left them (NULL: fenced off, nothing written), whether its lock was
-- released, and how many queues/keys the freed keys woke.
SELECT i.job_id, e.status::text AS status, e.available_at, u.unlocked,
       (SELECT count(*) FROM waiters) + (SELECT woken FROM unparked) AS woken
FROM input i
LEFT JOIN ended e ON e.job_id = i.job_id
LEFT JOIN unlocked u ON u.job_id = i.job_id
