-- An observer ended by itself (raised, or returned without being asked to stop): back to
-- 'created' with a backoff (`restart_at`), or 'failed' when it used up `max_restarts`, or
-- 'deleted' when its stop had been asked meanwhile. `failures` counts crashes in a row (the caller
-- passes the new count: 1 again after a long healthy run). Fenced on (name, epoch, node).
-- $1 name, $2 epoch, $3 node_id, $4 error text, $5 restart delay (seconds), $6 failures (new
-- count), $7 give up (boolean)
UPDATE dl_observers o
SET failures = $6::int, last_error = $4, last_error_at = now(), updated_at = now(),
    node_id = NULL, last_node_id = o.node_id,
    state = CASE WHEN o.desired = 'stop' THEN 'deleted' WHEN $7::boolean THEN 'failed' ELSE 'created' END,
    restart_at = now() + make_interval(secs => $5::float8),
    stopped_at = CASE WHEN o.desired = 'stop' OR $7::boolean THEN now() END,
    reason = CASE WHEN o.desired = 'stop' THEN 'stopped'
                  WHEN $7::boolean THEN 'crashed ' || $6::int || ' times in a row; gave up (max_restarts)'
                  ELSE 'crashed (' || $6::int || ' in a row); restarting after '
                       || round($5::numeric, 1) || 's' END
WHERE o.name = $1 AND o.epoch = $2 AND o.node_id = $3
RETURNING o.state, o.restart_at;
