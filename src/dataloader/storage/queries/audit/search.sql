-- A page of the audit trail, newest first (model/audit.py AuditFilter). Each filter is optional
-- (NULL: any). $1 exact actor label, $2 actor kind (the label's prefix before ':'), $3 exact action,
-- $4 action family prefix ('job.'), $5 target kind, $6 target id, $7 outcome, $8 since (inclusive),
-- $9 until (exclusive), $10/$11 the previous page's last (ts, id) (keyset: no OFFSET walk), $12 limit.
-- The prefixes are LIKE patterns anchored at the start (the text_pattern_ops indexes of 0043 serve
-- them); their own % and _ are escaped by the caller.
SELECT id, ts, actor, actor_kind, address, action, target_kind, target_id, details, outcome, error_code, face
FROM dl_audit
WHERE ($1::text IS NULL OR actor = $1)
  AND ($2::text IS NULL OR actor LIKE $2 || ':%')
  AND ($3::text IS NULL OR action = $3)
  AND ($4::text IS NULL OR action LIKE $4 || '%')
  AND ($5::text IS NULL OR target_kind = $5)
  AND ($6::text IS NULL OR target_id = $6)
  AND ($7::text IS NULL OR outcome = $7)
  AND ($8::timestamptz IS NULL OR ts >= $8)
  AND ($9::timestamptz IS NULL OR ts < $9)
  AND ($10::timestamptz IS NULL OR (ts, id) < ($10, $11::uuid))
ORDER BY ts DESC, id DESC
LIMIT $12;
