-- Key status (docs/security.md "Encryption at rest"): how many payload envelopes each stored column
-- holds under each key id, so an operator sees what a rotation has left under an old key before
-- removing it. No parameters. Reads every payload table whole, by design (an operator's count, run
-- under search/custom_plans with its statement timeout).
SELECT 'dl_jobs.args' AS payload, args->>'kid' AS kid, count(*)::bigint AS n
FROM dl_jobs WHERE args ?& array['$dl_enc', 'kid', 'ct'] GROUP BY 2
UNION ALL
SELECT 'dl_jobs.progress' AS payload, progress->>'kid' AS kid, count(*)::bigint AS n
FROM dl_jobs WHERE progress ?& array['$dl_enc', 'kid', 'ct'] GROUP BY 2
UNION ALL
SELECT 'dl_jobs.result' AS payload, result->>'kid' AS kid, count(*)::bigint AS n
FROM dl_jobs WHERE result ?& array['$dl_enc', 'kid', 'ct'] GROUP BY 2
UNION ALL
SELECT 'dl_process_tasks.args' AS payload, args->>'kid' AS kid, count(*)::bigint AS n
FROM dl_process_tasks WHERE args ?& array['$dl_enc', 'kid', 'ct'] GROUP BY 2
UNION ALL
SELECT 'dl_process_tasks.response' AS payload, response->>'kid' AS kid, count(*)::bigint AS n
FROM dl_process_tasks WHERE response ?& array['$dl_enc', 'kid', 'ct'] GROUP BY 2
UNION ALL
SELECT 'dl_processes.aux_state' AS payload, aux_state->>'kid' AS kid, count(*)::bigint AS n
FROM dl_processes WHERE aux_state ?& array['$dl_enc', 'kid', 'ct'] GROUP BY 2
UNION ALL
SELECT 'dl_process_events.payload' AS payload, payload->>'kid' AS kid, count(*)::bigint AS n
FROM dl_process_events WHERE payload ?& array['$dl_enc', 'kid', 'ct'] GROUP BY 2
UNION ALL
SELECT 'dl_process_feed.payload' AS payload, payload->>'kid' AS kid, count(*)::bigint AS n
FROM dl_process_feed WHERE payload ?& array['$dl_enc', 'kid', 'ct'] GROUP BY 2
UNION ALL
SELECT 'dl_workflow_steps.result' AS payload, result->>'kid' AS kid, count(*)::bigint AS n
FROM dl_workflow_steps WHERE result ?& array['$dl_enc', 'kid', 'ct'] GROUP BY 2
UNION ALL
SELECT 'dl_workflow_signals.payload' AS payload, payload->>'kid' AS kid, count(*)::bigint AS n
FROM dl_workflow_signals WHERE payload ?& array['$dl_enc', 'kid', 'ct'] GROUP BY 2
