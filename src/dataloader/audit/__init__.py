"""The audit trail (docs/security.md "Audit trail"): who changed what, when, from where, and how it
ended. Rows are written by the managers' changes (storage/audit_repository.py `audited`); this
capability reads them."""
