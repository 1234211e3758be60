-- Processes per namespace and status (the dl_processes gauge). No parameters.
SELECT ns, status, count(*) AS processes
FROM dl_processes
GROUP BY ns, status
