"""Console users: people with a role who sign in with their own password (docs/security.md)."""
