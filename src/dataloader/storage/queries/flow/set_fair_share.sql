-- Configure fair share of queue $1 (0024; docs/flow-control.md "Fair share"): $2 fair_share
-- (NULL: unchanged), $3 fair_weights as JSON text (partition_key -> weight, checked by
-- flow/fair_share.py; NULL with $4 true: every key weighs 1), $4 whether to set the weights.
-- From this statement's commit on, every claim on every node uses the queue's new order (each
-- claim statement gates on fair_share). The pause is not touched. Returns the queue's flow row.
INSERT INTO dl_queue_flow AS f (queue, fair_share, fair_weights, updated_at)
VALUES ($1, COALESCE($2::boolean, false), CASE WHEN $4::boolean THEN $3::jsonb END, now())
ON CONFLICT (queue) DO UPDATE
SET fair_share = COALESCE($2::boolean, f.fair_share),
    fair_weights = CASE WHEN $4::boolean THEN $3::jsonb ELSE f.fair_weights END,
    updated_at = now()
RETURNING f.queue, f.paused, f.paused_at, f.fair_share, f.fair_weights;
