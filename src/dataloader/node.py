"""The node root: the one place that builds what a working process runs — the queue workers (a
`WorkerManager`) and every background duty beside them — and checks every duty's settings. The
capabilities' managers that `App`, the facade, hands out are built in managers.py.

Each capability owns its duties (jobs/reaper.py, jobs/queue_time.py, retention/pruner.py,
retention/rollup.py, operations/runner.py, schedules/scheduler.py, observers/node_registry.py); the
engine (workers/) runs a given list of them and knows none. Which duties a node runs, in which
order (the supervisor stops them in reverse) and on which switch, is decided here only:

    reaper (every node, unless `reaper=False`)
    user-registered duties (`dataloader.maintenance.register_service`)
    duties given by the caller (`services=`)
    with `capabilities=True` (what `App.running()` asks for):
        scheduler (every node), node heartbeat (every node), pruner (leader, DL_RETENTION_ENABLED),
        stats rollup (leader, DL_STATS_ENABLED), storage sampler (leader, DL_STORAGE_SAMPLE_ENABLED),
        queue-time checker (every node, when a limit is set),
        operation runner (every node, DL_OPERATIONS_ENABLED)
    and the leader elector, started first, when any of them is leader-only.

They all hear their NOTIFY channels through one listening session (`listening_session`): the
workers (`dl_jobs`, `dl_cancel`), the scheduler, the node heartbeat and the operation runner, and
the App's process callers beside them.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from pydantic import BaseModel, ValidationError

from dataloader.config import DEFAULT_SHARD, Queue, Settings
from dataloader.exceptions import ConfigError
from dataloader.flow.manager import FlowManager
from dataloader.health.storage import StorageSampler, StorageSettings
from dataloader.jobs.queue_time import QueueTimeChecker, QueueTimeSettings
from dataloader.jobs.reaper import Reaper, ReaperSettings
from dataloader.maintenance import LeaderSettings, Service, ServiceDeps, registered_services
from dataloader.observers.node_registry import NodeHeartbeat, NodeSettings
from dataloader.operations.runner import OperationRunner, OperationRunnerSettings
from dataloader.processes.registry import processors
from dataloader.processes.step import run_step
from dataloader.retention.archive import archive_of
from dataloader.retention.partition_archive import export_before_drop
from dataloader.retention.partitions import JournalPartitioner
from dataloader.retention.pruner import Pruner, PrunerSettings
from dataloader.retention.rollup import StatsRollup, StatsSettings
from dataloader.schedules.scheduler import Scheduler
from dataloader.storage.database import Database
from dataloader.storage.health_repository import HealthRepository
from dataloader.storage.notifier import Notifier
from dataloader.storage.observer_repository import NodeRepository
from dataloader.storage.operation_repository import OperationRepository, QueueTimeRepository
from dataloader.storage.process_repository import PROCESS_TASK
from dataloader.storage.repositories import JobRepository
from dataloader.storage.schedule_repository import ScheduleRepository
from dataloader.workers.manager import WorkerManager
from dataloader.workers.pipelines.registry import PipelineRegistry

_VARIABLE = re.compile(r"\bDL_[A-Z0-9_]+\b")


def check_duty_settings(settings: Settings) -> None:
    """ConfigError naming the variable when a duty could not be built from `settings`.

    Each duty validates its slice of Settings (`XSettings.from_settings`) when a node builds it,
    which is after the pool is open and the workers start: a rule that spans variables (the node
    registry's DL_NODE_DEAD_AFTER_SEC against its heartbeat) would otherwise surface as a pydantic
    traceback from deep inside `running()`. So they are all built up front here, and the first
    problem is the ConfigError the CLI prints as one line with exit code 2.
    """
    # The duties a node builds: the switched-off ones are never built, so not checked.
    duties: list[type[BaseModel]] = [ReaperSettings, LeaderSettings, NodeSettings, QueueTimeSettings]
    if settings.retention_enabled:
        duties.append(PrunerSettings)
    if settings.stats_enabled:
        duties.append(StatsSettings)
    if settings.operations_enabled:
        duties.append(OperationRunnerSettings)
    if settings.storage_sample_enabled:
        duties.append(StorageSettings)
    for duty in duties:
        try:
            duty.from_settings(settings)  # type: ignore[attr-defined]
        except ValidationError as exc:
            raise _config_error(duty, exc) from None


def _config_error(duty: type[BaseModel], exc: ValidationError) -> ConfigError:
    err = exc.errors()[0]
    message = str(err.get("msg", "")).removeprefix("Value error, ")
    named = _VARIABLE.search(message)
    if named:
        return ConfigError(named.group(0), message[named.end():].lstrip(" :") or message)
    field = str(err["loc"][0]) if err.get("loc") else ""
    described = duty.model_fields[field].description if field in duty.model_fields else None
    variable = described.split()[0] if described and described.startswith("DL_") else f"DL_{field.upper()}"
    return ConfigError(variable, message)


def listening_session(settings: Settings, dsn: str) -> Notifier:
    """The node's one LISTEN session (storage/notifier.py), probed every 3 fallback polls (at least
    5 s) while idle: a half-open connection would otherwise leave the node deaf unnoticed."""
    return Notifier(dsn, check_period=max(settings.poll_fallback_sec * 3, 5.0))


def build_node(settings: Settings, dsn: str, pool: asyncpg.Pool, registry: PipelineRegistry, *,
               reaper: bool = True, capabilities: bool = False, services: Sequence[Service] = (),
               notifier: Notifier | None = None) -> WorkerManager:
    """The worker manager of `settings.workers` with every duty of this node (see the module's
    docstring for the list and order). `capabilities=False` builds the engine's own duties only (the
    reaper and the registered ones): what a bare engine in the tests runs. `notifier`: the listening
    session the node shares with its App (None: one of the node's own, closed with it)."""
    owns_notifier = notifier is None
    if notifier is None:
        notifier = listening_session(settings, dsn)
    repo = JobRepository(pool)
    duties: list[Service] = []
    if reaper:
        # with the node registry (capabilities), it also takes back at once the jobs of this
        # machine's nodes whose process died
        duties.append(Reaper(repo, ReaperSettings.from_settings(settings),
                             nodes=NodeRepository(pool) if capabilities else None))
    deps = ServiceDeps(settings=settings, dsn=dsn, pool=pool, repo=repo, notifier=notifier)
    duties.extend(factory(deps) for factory in registered_services())
    duties.extend(services)
    if capabilities:
        duties.extend(capability_duties(settings, dsn, pool, registry, notifier))
    return WorkerManager(settings, dsn, pool, registry, notifier=notifier, owns_notifier=owns_notifier,
                         services=duties)


def capability_duties(settings: Settings, dsn: str, pool: asyncpg.Pool, registry: PipelineRegistry,
                      notifier: Notifier) -> list[Service]:
    """The duties of the capabilities, in start order: the scheduler and the node heartbeat on every
    node, the pruner and the stats rollup on the leader (unless switched off), the queue-time checker
    (when a limit is set) and the bulk operation runner on every node, all hearing their channels
    through `notifier`."""
    duties: list[Service] = [scheduler(settings, pool, registry, notifier),
                             NodeHeartbeat.from_settings(pool, dsn, settings,
                                                         queues=[w.queue for w in settings.workers],
                                                         notifier=notifier)]
    if settings.retention_enabled:
        duties.append(Pruner.from_settings(pool, settings))
    if settings.journal_partitions_enabled:
        # with an archive, a partition is dropped only once its rows are exported (partition_archive.py)
        archive = archive_of(settings)
        duties.append(JournalPartitioner.from_settings(
            pool, settings, before_drop=export_before_drop(pool, archive) if archive is not None else None))
    if settings.stats_enabled:
        duties.append(StatsRollup.from_settings(pool, settings))
    if settings.storage_sample_enabled:
        duties.append(StorageSampler(HealthRepository(pool), StorageSettings.from_settings(settings)))
    queue_time = QueueTimeSettings.from_settings(settings)
    if queue_time.enabled:
        duties.append(QueueTimeChecker(QueueTimeRepository(pool), queue_time))
    if settings.operations_enabled:
        duties.append(OperationRunner(OperationRepository(pool), OperationRunnerSettings.from_settings(settings),
                                      owner=settings.node_name, default_lease_ttl_sec=settings.default_lease_ttl_sec,
                                      max_args_bytes=settings.max_args_bytes, notifier=notifier))
    return duties


@asynccontextmanager
async def running(db: Database, settings: Settings, registry: PipelineRegistry, flow: FlowManager,
                  managers: list[WorkerManager], *, reaper: bool, shard_of: Callable[[str], str],
                  notifier: Notifier | None = None) -> AsyncIterator[WorkerManager]:
    """The node of one database working `settings.workers` (with the process queues on the default
    shard), listed in `managers` while it runs: the queues' declared limits applied first, then
    the workers and duties started; leaving stops them."""
    await db.require_sessions()
    if db.shard == DEFAULT_SHARD:
        settings = with_process_queues(settings)
    manager = build_node(settings, db.session_dsn, await db.workers_pool(), registry, reaper=reaper,
                         capabilities=True, notifier=notifier)
    await flow.apply_declared({q: s for q, s in settings.declared_queue_settings().items()
                               if shard_of(q) == db.shard})
    tasks = settings.declared_task_settings(registry.declared_task_limits())
    await flow.apply_declared_tasks({(q, t): s for (q, t), s in tasks.items() if shard_of(q) == db.shard})
    await manager.start()
    managers.append(manager)
    try:
        await manager.wait_listening()
        yield manager
    finally:
        managers.remove(manager)
        await manager.stop()


def scheduler(settings: Settings, pool: asyncpg.Pool, registry: PipelineRegistry, notifier: Notifier) -> Scheduler:
    """The cron scheduler (every node; the database makes each tick enqueue once), which names a
    schedule's function by the pipeline registered for it."""
    def task_of(func: Callable[..., Any]) -> str | None:
        names = [n for n in registry.names() if (p := registry.get(n)) is not None and p.func is func]
        return names[0] if len(names) == 1 else None  # none or several: the schedule names its task

    def pipeline_max_attempts(task: str) -> int | None:
        pipeline = registry.get(task)
        return pipeline.max_attempts if pipeline is not None else None

    return Scheduler(ScheduleRepository(pool), notifier=notifier, default_lease_ttl_sec=settings.default_lease_ttl_sec,
                     task_of=task_of, pipeline_max_attempts=pipeline_max_attempts)


def register_node_pipelines(registry: PipelineRegistry) -> None:
    """The pipelines a capability brings to every node: the step that runs a process's tasks."""
    registry.register(PROCESS_TASK, run_step, replace=True)


def process_concurrency() -> int:
    """How many process tasks a node runs at once (the pool has a connection for each)."""
    return sum(p.concurrency for ns in processors.names() if (p := processors.get(ns)) is not None)


def with_process_queues(settings: Settings) -> Settings:
    """The workers of a node: the settings' queues plus `process:<ns>` of every registered
    processor not already listed (its `concurrency` at a time)."""
    listed = {w.queue for w in settings.workers}
    extra = [Queue(p.queue, p.concurrency) for ns in processors.names()
             if (p := processors.get(ns)) is not None and p.queue not in listed]
    return settings.model_copy(update={"workers": [*settings.workers, *extra]}) if extra else settings
