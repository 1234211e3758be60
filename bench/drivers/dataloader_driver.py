"""dataloader through its library API: JobService.trigger (one job) and trigger_many (a batch,
which is JobRepository.insert_jobs underneath). Workers are the real CLI, started by the harness."""

from __future__ import annotations

import asyncpg

from bench import driver_cli
from dataloader.services.jobs import JobRequest, JobService
from dataloader.storage import migrate
from dataloader.storage.db import create_pool
from dataloader.storage.repositories import JobRepository
from dataloader.workers.pipelines.registry import load_pipeline_modules, registry

QUEUE = "bench"
TASKS = {"noop": "dl.noop", "mark": "bench.mark"}


class DataloaderDriver:
    def __init__(self) -> None:
        self.dsn = ""
        self.pool: asyncpg.Pool | None = None
        self.jobs: JobService | None = None

    async def open(self, dsn: str) -> None:
        self.dsn = dsn
        # The service refuses tasks it does not know, so the client registers the same modules.
        load_pipeline_modules(["bench.drivers.dl_pipelines"])

    async def ready(self) -> None:
        await self._service()

    async def _service(self) -> JobService:
        if self.jobs is None:
            self.pool = await create_pool(self.dsn, min_size=1, max_size=2)
            self.jobs = JobService(JobRepository(self.pool), registry, default_lease_ttl_sec=60,
                                   max_args_bytes=256 * 1024)
        return self.jobs

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    async def install(self) -> None:
        await migrate.upgrade(self.dsn)

    @staticmethod
    def _request(key: int, task: str, serial: bool = False) -> JobRequest:
        args = {"k": key} if task == "mark" else {}
        return JobRequest(queue=QUEUE, task=TASKS[task], lock_key="serial" if serial else str(key), args=args)

    async def enqueue_one(self, key: int, task: str) -> None:
        await (await self._service()).trigger(self._request(key, task), producer="bench")

    async def enqueue_many(self, keys: range, task: str, serial: bool) -> None:
        service = await self._service()
        await service.trigger_many([self._request(k, task, serial) for k in keys], producer="bench")

    async def worker(self, concurrency: int, serial: bool) -> None:
        raise SystemExit("dataloader workers run through `python -m dataloader worker`")


if __name__ == "__main__":
    driver_cli.main(DataloaderDriver())
