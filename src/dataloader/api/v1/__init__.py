"""API v1 (003 §5): /api/v1/jobs/*."""
