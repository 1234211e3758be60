-- An observer saves its position (`checkpoint`) and/or reports its state (`status`); null keeps
-- the old value. Fenced on (name, epoch) while held: no row back means this run lost the
-- observer (moved or stopped), and the caller stops it.
-- $1 name, $2 epoch, $3 checkpoint (JSON text or null), $4 status (JSON text or null)
UPDATE dl_observers
SET checkpoint = COALESCE($3::text::jsonb, checkpoint), status = COALESCE($4::text::jsonb, status),
    updated_at = now()
WHERE name = $1 AND epoch = $2 AND node_id IS NOT NULL
RETURNING name;
