"""The chaos suite: real node processes killed, SIGTERMed and cut off from a restarting PostgreSQL
while jobs are enqueued over HTTP; the engine's promises are then checked from the database.
See docs/chaos.md."""
