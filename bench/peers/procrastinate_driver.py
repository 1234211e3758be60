"""Procrastinate through its public API (run with the peers venv).

- App(connector=PsycopgConnector(conninfo=..., max_size=C+4)): the pool is sized like
  dataloader's (concurrency + 4); psycopg_pool's default of 4 connections would starve 16 slots.
- enqueue: `task.defer_async(**kwargs)`; a batch with `task.batch_defer_async(*kwargs)`.
- worker: `app.run_worker_async(queues=["bench"], concurrency=C)`, stopped by its own SIGTERM
  handler (graceful shutdown).
- serialization: `task.configure(lock="serial")`: no two jobs with one lock run at once.
- schema: `app.schema_manager.apply_schema_async()`.
"""

from __future__ import annotations

import logging
import time

import procrastinate

from bench import driver_cli, marks

QUEUE = "bench"


class ProcrastinateDriver:
    def __init__(self) -> None:
        self.app: procrastinate.App | None = None
        self._opened = False

    def _build(self, dsn: str, max_size: int) -> procrastinate.App:
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(
            conninfo=dsn, min_size=1, max_size=max_size))

        @app.task(name="noop", queue=QUEUE)
        async def noop() -> None:
            pass

        @app.task(name="mark", queue=QUEUE)
        async def mark(k: int) -> None:
            started = time.time()
            marks.record(str(k), started)

        self.tasks = {"noop": noop, "mark": mark}
        return app

    async def open(self, dsn: str) -> None:
        self.dsn = dsn

    async def _app(self, max_size: int = 4) -> procrastinate.App:
        if self.app is None:
            self.app = self._build(self.dsn, max_size)
            await self.app.open_async()
        return self.app

    async def close(self) -> None:
        if self.app is not None:
            await self.app.close_async()

    async def install(self) -> None:
        app = await self._app()
        await app.schema_manager.apply_schema_async()

    async def ready(self) -> None:
        await self._app()

    async def enqueue_one(self, key: int, task: str) -> None:
        await self._app()
        if task == "mark":
            await self.tasks["mark"].defer_async(k=key)
        else:
            await self.tasks["noop"].defer_async()

    async def enqueue_many(self, keys: range, task: str, serial: bool) -> None:
        await self._app()
        kwargs = [{"k": k} for k in keys] if task == "mark" else [{} for _ in keys]
        target = self.tasks[task]
        deferrer = target.configure(lock="serial") if serial else target.configure()
        await deferrer.batch_defer_async(*kwargs)

    async def worker(self, concurrency: int, serial: bool) -> None:
        logging.basicConfig(level=logging.WARNING)
        app = await self._app(max_size=concurrency + 4)
        await app.run_worker_async(queues=[QUEUE], concurrency=concurrency)


if __name__ == "__main__":
    driver_cli.main(ProcrastinateDriver())
