"""Benchmark harness: dataloader against PgQueuer and Procrastinate on one PostgreSQL.

Kept free of imports: the peers' driver scripts import `bench.marks` from the peers virtualenv,
where neither dataloader nor the harness's own dependencies are installed."""
