"""dataloader's side of the benchmark: its driver script and the bench pipelines (project venv)."""
