"""The engine: queue workers, the reaper, the notification listener and the pipeline registry."""
