"""Alembic environment. The connection is handed in by `dataloader.storage.migrate`, which holds
the migration advisory lock on it, so Alembic never opens a connection of its own."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, transaction_per_migration=True)
with context.begin_transaction():
    context.run_migrations()
