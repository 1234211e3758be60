"""WorkerManager (003 §9): the queue workers of WORKERS_JSON and the background duties it is given
(with the leader elector when one of them is leader-only) of one process, started together and
stopped gracefully. Which duties a node runs is decided by the node root (dataloader/node.py); the
engine knows none of them.

The workers hear `dl_jobs` (wake the queue's worker) and `dl_cancel` (stop a running job) through
the node's one listening session (storage/notifier.py), which the duties share; after it
(re)connects every queue is woken once, because a notification sent while it was away is gone."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence

import asyncpg

from dataloader.config import Settings
from dataloader.maintenance import (
    BackoffPolicy,
    LeaderElector,
    LeaderSettings,
    Scope,
    Service,
    ServiceSnapshot,
    Supervisor,
)
from dataloader.storage.notifier import Notifier, Subscription
from dataloader.storage.repositories import JobRepository
from dataloader.workers.env import EngineEnv
from dataloader.workers.pipelines.registry import PipelineRegistry
from dataloader.workers.queue_worker import QueueWorker

log = logging.getLogger("dataloader.manager")

FORCED_STOP_GRACE_SEC = 5.0
JOBS_CHANNEL = "dl_jobs"  # payload: the queue that has a new runnable job
CANCEL_CHANNEL = "dl_cancel"  # payload: the id of a job to stop


class WorkerManager:
    def __init__(
        self,
        settings: Settings,
        dsn: str,
        pool: asyncpg.Pool,
        registry: PipelineRegistry,
        *,
        notifier: Notifier,
        owns_notifier: bool = False,
        services: Sequence[Service] = (),
    ) -> None:
        """`notifier`: the node's listening session, shared with its duties; `owns_notifier`: it
        is this node's alone, closed with it."""
        self.settings = settings
        self.env = EngineEnv(pool=pool, repo=JobRepository(pool), registry=registry, settings=settings,
                             worker_name=settings.node_name)
        self.workers = {w.queue: QueueWorker(w.queue, w.concurrency, self.env) for w in settings.workers}
        self.notifier = notifier
        self._owns_notifier = owns_notifier
        self._subscriptions: list[Subscription] = []
        # No leader-only duty, no election: a node spends no connection on a lock nobody needs.
        self.elector = (LeaderElector(dsn, LeaderSettings.from_settings(settings), node_name=settings.node_name)
                        if any(s.scope is Scope.LEADER for s in services) else None)
        self.supervisor = Supervisor(
            services, elector=self.elector,
            backoff=BackoffPolicy(base_sec=settings.service_restart_backoff_sec,
                                  cap_sec=max(settings.service_restart_backoff_max_sec,
                                              settings.service_restart_backoff_sec)))
        self._worker_tasks: list[asyncio.Task[None]] = []
        self._service_tasks: list[asyncio.Task[None]] = []

    @property
    def holds_stray_locks(self) -> bool:
        """True after a forced stop left sync pipeline threads running with their lock_keys held."""
        return bool(self.env.quarantine)

    def service(self, name: str) -> Service | None:
        """The duty called `name`, if this manager runs one."""
        return next((s for s in self.supervisor.services if s.name == name), None)

    @property
    def reaper(self) -> Service | None:
        """The lease reaper, when the node runs one (a name, not a class: the engine knows no duty)."""
        return self.service("reaper")

    @property
    def queues(self) -> list[str]:
        return list(self.workers)

    def services_status(self) -> list[ServiceSnapshot]:
        """Each maintenance service's state, for /status (no I/O)."""
        return self.supervisor.status()

    @property
    def is_leader(self) -> bool | None:
        """Whether this node leads; None when it runs no election (no leader-only service)."""
        return self.supervisor.leading

    def running_jobs(self) -> list[dict[str, object]]:
        return [
            {"job_id": str(a.job.job_id), "queue": a.job.queue, "task": a.job.task, "attempt": a.job.attempt}
            for w in self.workers.values() for a in w.running.values()
        ]

    async def start(self) -> None:
        self._subscriptions = [
            await self.notifier.subscribe(JOBS_CHANNEL, self._on_queue_notified, on_missed=self._wake_all),
            await self.notifier.subscribe(CANCEL_CHANNEL, self._on_cancel)]
        await self.notifier.start(wait=False)  # `wait_listening` waits, for whoever needs it
        await self.supervisor.start()
        for worker in self.workers.values():
            self._worker_tasks.append(asyncio.create_task(self._supervise(worker), name=f"worker-{worker.queue}"))
        log.info("workers started", extra={
            "queues": {w.queue: w.concurrency for w in self.workers.values()},
            "reaper": self.reaper is not None, "worker_name": self.env.worker_name,
            "services": [s.name for s in self.supervisor.services]})

    async def wait_listening(self, timeout: float = 10.0) -> None:
        await self.notifier.wait_listening(timeout)

    async def stop(self, timeout: float | None = None) -> None:
        """Stop the maintenance services, stop claiming, ask running pipelines to stop at their next
        chunk, wait up to `timeout`, then interrupt what is left; unfinished jobs go back to the queue."""
        timeout = self.settings.shutdown_timeout_sec if timeout is None else timeout
        # In parallel with the workers' stop: a service finishing its tick must not delay the stop
        # requests to running pipelines (the shutdown timeout is theirs).
        services_stopped = asyncio.create_task(self.supervisor.stop(), name="maintenance-stop")
        running = sum(len(w.running) for w in self.workers.values())
        log.info("stopping workers", extra={"running_jobs": running, "timeout_sec": timeout})
        for worker in self.workers.values():
            await worker.stop_claiming()
            worker.stop_running("shutdown")
        pending: set[asyncio.Task[None]] = set(self._worker_tasks)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=timeout)
        if pending:
            log.warning("shutdown timeout reached; interrupting running pipelines",
                        extra={"still_running": [j["job_id"] for j in self.running_jobs()]})
            for worker in self.workers.values():
                worker.force_stop()
            _, pending = await asyncio.wait(pending, timeout=FORCED_STOP_GRACE_SEC)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._worker_tasks, *self._service_tasks, services_stopped, return_exceptions=True)
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            await self.notifier.unsubscribe(subscription)
        if self._owns_notifier:
            await self.notifier.close()
        log.info("workers stopped")

    async def _supervise(self, worker: QueueWorker) -> None:
        """Keep a queue worker running: a crash (a bug, never a database outage, which the worker
        rides out itself) is logged and the worker restarted, instead of the queue going silent.
        Jobs it was running keep their lease and come back through the reaper."""
        while True:
            try:
                await worker.run()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("queue worker crashed; restarting it", extra={"queue": worker.queue})
                await asyncio.sleep(1.0)
                worker = self.workers[worker.queue] = QueueWorker(worker.queue, worker.concurrency, self.env)

    def _on_queue_notified(self, queue: str) -> None:
        worker = self.workers.get(queue)
        if worker is not None:
            worker.hint("notify")

    def _on_cancel(self, payload: str) -> None:
        try:
            job_id = uuid.UUID(payload)
        except ValueError:
            log.warning("ignored malformed cancel notification", extra={"payload": payload[:100]})
            return
        for worker in self.workers.values():
            worker.cancel(job_id)

    def _wake_all(self) -> None:
        for worker in self.workers.values():
            worker.hint("reconnect")
