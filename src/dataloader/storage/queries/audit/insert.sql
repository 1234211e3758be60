-- One row of the audit trail, in the transaction of the change it records (storage/audit_repository.py
-- `audited`), or alone for a refusal (nothing changed, so nothing to commit with).
-- $1 id (UUID v7, made by the writer: the cursor's tie-break across shards), $2 actor label, $3 actor
-- kind, $4 address, $5 action, $6 target kind, $7 target id, $8 details as JSON text (text, not
-- jsonb, so every connection kind encodes it alike: our pool's codec, a caller's driver), $9 outcome,
-- $10 error code, $11 face. ts is the database's clock: the transaction's time, the change's own.
INSERT INTO dl_audit (id, actor, actor_kind, address, action, target_kind, target_id, details, outcome,
                      error_code, face)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::jsonb, $9, $10, $11);
