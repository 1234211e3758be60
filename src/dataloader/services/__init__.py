"""Business rules over the storage layer; no HTTP, no SQL text."""
