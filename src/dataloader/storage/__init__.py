"""Storage: connections, migrations and every SQL statement (the only layer that knows SQL)."""
