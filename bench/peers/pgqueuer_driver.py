"""PgQueuer through its public API (run with the peers venv).

- enqueue: `Queries.enqueue(entrypoint, payload, priority)`; lists of each for a batch.
- worker: `QueueManager(Queries(AsyncpgDriver(connection)))`: the job-processing half of
  `PgQueuer` over one asyncpg connection (the documented set-up) without the SchedulerManager,
  whose cron polling has no counterpart in the other systems; entrypoints registered with
  `@qm.entrypoint`, `qm.run(batch_size=8, max_concurrent_tasks=C)`:
  `max_concurrent_tasks` is PgQueuer's per-worker cap (it must be at least twice the batch size,
  hence 8 for C=16).
- event loop: uvloop, as PgQueuer's own `pgq run` sets it up (every action of this driver).
- serialization: PgQueuer has no per-key lock; the nearest equivalent is an entrypoint with
  `concurrency_limit=1` (one running job of that entrypoint across all workers), used for the
  "serial" jobs of the handoff measure and only registered for it, because a limited entrypoint
  switches the dequeue to its capacity-gated form.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time

import asyncpg
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager

from bench import driver_cli, marks

SERIAL_ENTRYPOINT = "serial"


class PgQueuerDriver:
    def __init__(self) -> None:
        self.dsn = ""
        self.conn: asyncpg.Connection | None = None
        self.queries: Queries | None = None

    async def open(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn = await asyncpg.connect(dsn)
        self.queries = Queries(AsyncpgDriver(self.conn))

    async def close(self) -> None:
        if self.conn is not None and not self.conn.is_closed():
            await self.conn.close()

    async def install(self) -> None:
        assert self.queries is not None
        await self.queries.install()

    async def ready(self) -> None:
        pass  # connected in open()

    async def enqueue_one(self, key: int, task: str) -> None:
        assert self.queries is not None
        await self.queries.enqueue(task, str(key).encode() if task == "mark" else None, 0)

    async def enqueue_one_in_transaction(self, key: int, task: str) -> None:
        """Queries.enqueue inside the caller's own transaction on the same connection."""
        assert self.queries is not None and self.conn is not None
        async with self.conn.transaction():
            await self.queries.enqueue(task, str(key).encode() if task == "mark" else None, 0)

    async def enqueue_many(self, keys: range, task: str, serial: bool) -> None:
        assert self.queries is not None
        entrypoint = SERIAL_ENTRYPOINT if serial else task
        payloads = [str(k).encode() if task == "mark" else None for k in keys]
        await self.queries.enqueue([entrypoint] * len(keys), payloads, [0] * len(keys))

    async def worker(self, concurrency: int, serial: bool) -> None:
        assert self.conn is not None
        logging.getLogger("pgqueuer").setLevel(logging.WARNING)
        qm = QueueManager(Queries(AsyncpgDriver(self.conn)))

        @qm.entrypoint("noop")
        async def noop(job: Job) -> None:
            pass

        async def mark(job: Job) -> None:
            started = time.time()
            assert job.payload is not None
            marks.record(job.payload.decode(), started)

        qm.entrypoint("mark")(mark)
        if serial:
            qm.entrypoint(SERIAL_ENTRYPOINT, concurrency_limit=1)(mark)

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, qm.shutdown.set)
        await qm.run(batch_size=max(1, concurrency // 2), max_concurrent_tasks=concurrency)


if __name__ == "__main__":
    driver_cli.main(PgQueuerDriver(), uvloop=True)  # `pgq run` runs PgQueuer on uvloop
