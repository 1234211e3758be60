"""dataloader through its public API only (`import dataloader`), as any user would drive it:
`App.enqueue` (one job) and `App.enqueue_many` (a batch). Workers are the real CLI, started by the
harness. (Measuring a commit older than the public App, before b8e38b8, needs that commit's own
driver.)"""

from __future__ import annotations

import os
from typing import Any

import asyncpg

import dataloader
from bench import driver_cli

QUEUE = "bench"
TASKS = {"noop": "dl.noop", "mark": "bench.mark"}
# The payload every job carries in the dataloader_payload / dataloader_enc variants: ~200 bytes of
# args, like an order or a payment (what encryption at rest has to seal); none otherwise.
PAYLOAD: dict[str, Any] = {"customer": "c-0042", "iban": "DE89370400440532013000", "amount": 4200,
                           "note": "x" * 120} if os.environ.get("BENCH_DL_PAYLOAD") else {}


class DataloaderDriver:
    def __init__(self) -> None:
        self.dsn = ""
        self.app: dataloader.App | None = None
        self.conn: asyncpg.Connection | None = None  # the caller's own connection (enqueue-single-tx)

    async def open(self, dsn: str) -> None:
        self.dsn = dsn

    async def ready(self) -> None:
        await self._app()
        await self._conn()

    async def _app(self) -> dataloader.App:
        if self.app is None:
            # A producer: it serves no queue, so it needs no pipeline code and a small pool.
            settings = dataloader.Settings(db_dsn=self.dsn, workers=[], db_pool_extra=2)
            self.app = await dataloader.App(settings).open()
        return self.app

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
        if self.app is not None:
            await self.app.close()

    async def install(self) -> None:
        app = dataloader.App(dataloader.Settings(db_dsn=self.dsn, workers=[]))
        await app.open(migrate_schema=True)
        await app.close()

    @staticmethod
    def _args(key: int, task: str) -> dict[str, Any]:
        args: dict[str, Any] = {"k": key} if task == "mark" else {}
        if PAYLOAD:  # the dataloader_payload / dataloader_enc variants (bench/systems.py)
            args.update(PAYLOAD)
        return args

    async def enqueue_one(self, key: int, task: str) -> None:
        await (await self._app()).enqueue(TASKS[task], self._args(key, task), queue=QUEUE, lock_key=str(key))

    async def enqueue_one_in_transaction(self, key: int, task: str) -> None:
        """App.enqueue(conn=...) inside the caller's own transaction on the caller's connection."""
        conn = await self._conn()
        async with conn.transaction():
            await (await self._app()).enqueue(TASKS[task], self._args(key, task), queue=QUEUE, lock_key=str(key),
                                              conn=conn)

    async def _conn(self) -> asyncpg.Connection:
        if self.conn is None:
            self.conn = await asyncpg.connect(self.dsn)
        return self.conn

    async def enqueue_many(self, keys: range, task: str, serial: bool) -> None:
        await (await self._app()).enqueue_many([
            {"task": TASKS[task], "args": self._args(k, task), "queue": QUEUE,
             "lock_key": "serial" if serial else str(k)} for k in keys])

    async def worker(self, concurrency: int, serial: bool) -> None:
        raise SystemExit("dataloader workers run through `python -m dataloader worker`")


if __name__ == "__main__":
    # uvloop, as every `dataloader` command runs (cli/common.py) and as PgQueuer's driver runs: the two
    # producers measured on the same event loop.
    driver_cli.main(DataloaderDriver(), uvloop=True)
