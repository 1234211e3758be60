"""Infrastructure routes: `/health` (liveness, no database) and `/status` (readiness, with the database).

Both stay open when DL_API_TOKEN is set, so orchestrator probes need no secret; `/status` shows
queue names, counts and which live nodes serve each queue (a queue no node serves says so) but no
job contents.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from functools import cache
from typing import Any, Literal

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from dataloader.api.runtime import Runtime, get_runtime
from dataloader.api.v1.schemas import ErrorResponse
from dataloader.api.v1.utils import safe_text
from dataloader.storage import migrate
from dataloader.version import __version__

log = logging.getLogger("dataloader.api")

router = APIRouter(tags=["infrastructure"])

# A readiness probe must answer before the orchestrator's own timeout (often 1 s).
STATUS_DB_TIMEOUT_SEC = 2.0


class HealthResponse(BaseModel):
    status: str = Field(description="Always 'ok' while the process serves HTTP")
    version: str
    node: str


class DatabaseStatus(BaseModel):
    reachable: bool
    latency_ms: float | None = None
    schema_revision: str | None = Field(default=None, description="Alembic revision of the database")
    schema_head: str = Field(description="Newest revision this code knows")
    schema_current: bool | None = None
    error: str | None = None


class QueueStatus(BaseModel):
    queue: str
    counts: dict[str, int] = Field(description="Jobs by status (queued, running)")
    oldest_runnable_age_sec: float | None = Field(
        description="How long the oldest queued job whose available_at has passed has been waiting")
    served_by: list[str] = Field(default_factory=list, description=(
        "Live nodes that run workers for this queue (their WORKERS_JSON), by name"))
    served: bool = Field(default=False, description=(
        "false: no live node serves this queue, so its jobs wait until one starts"))


class WorkerQueue(BaseModel):
    queue: str
    concurrency: int
    running: int


class WorkersStatus(BaseModel):
    queues: list[WorkerQueue] = Field(description="This node's WORKERS_JSON and what runs now")
    running_jobs: list[dict[str, Any]]


class ServiceInfo(BaseModel):
    """One maintenance service of this node (dataloader.maintenance; docs/maintenance.md)."""

    name: str
    scope: Literal["every_node", "leader"] = Field(description="Runs on every node, or only on the leader")
    state: Literal["running", "stopped", "crashed", "backoff", "standby"] = Field(
        description="standby: leader-only and this node does not lead; backoff: crashed, restart pending")
    restarts: int = Field(description="Restarts after a crash since this process started")
    last_error: str | None = Field(description="Last crash or failed tick")
    last_error_at: datetime | None
    last_tick_at: datetime | None = Field(description="End of the last tick (periodic services, the elector)")


class StatusResponse(BaseModel):
    status: str = Field(description="'ok', or 'unavailable' (with HTTP 503) when the database is down")
    version: str
    node: str
    database: DatabaseStatus
    queues: list[QueueStatus] = Field(description="Across all nodes sharing the database")
    workers: WorkersStatus | None = Field(description="null when this process runs no workers")
    leader: bool | None = Field(default=None, description="Whether this node holds the maintenance leader "
                                "lock; null when it runs no election (no leader-only service)")
    services: list[ServiceInfo] = Field(default_factory=list, description="This node's maintenance services")


@router.get("/health", response_model=HealthResponse, summary="Liveness: the process answers")
async def health(runtime: Runtime = Depends(get_runtime)) -> HealthResponse:
    return HealthResponse(status="ok", version=__version__, node=runtime.settings.node_name)


# Probes and load balancers often send HEAD. Same handlers, left out of the schema (one operation
# per path is enough there; HEAD is GET without the body, which the server drops).
router.add_api_route("/health", health, methods=["HEAD"], include_in_schema=False)


@cache
def _head_revision() -> str:
    # Reads the migration scripts from disk: once per process is enough.
    return migrate.head_revision()


def _workers(runtime: Runtime) -> WorkersStatus | None:
    manager = runtime.manager
    if manager is None:
        return None
    running = manager.running_jobs()
    per_queue: dict[str, int] = {}
    for job in running:
        per_queue[str(job["queue"])] = per_queue.get(str(job["queue"]), 0) + 1
    return WorkersStatus(
        queues=[WorkerQueue(queue=w.queue, concurrency=w.concurrency, running=per_queue.get(w.queue, 0))
                for w in manager.settings.workers],
        running_jobs=running,
    )


def _services(runtime: Runtime) -> tuple[bool | None, list[ServiceInfo]]:
    manager = runtime.manager
    if manager is None:
        return None, []
    return manager.is_leader, [
        ServiceInfo(name=s.name, scope=s.scope.value, state=s.state.value, restarts=s.restarts,
                    last_error=safe_text(s.last_error) if s.last_error else None,
                    last_error_at=s.last_error_at, last_tick_at=s.last_tick_at)
        for s in manager.services_status()
    ]


@router.get(
    "/status",
    response_model=StatusResponse,
    summary="Readiness: database, schema, queues and this node's workers",
    responses={503: {"model": StatusResponse, "description": "The database cannot be reached"},
               500: {"model": ErrorResponse}},
)
async def status(runtime: Runtime = Depends(get_runtime)) -> Any:
    head = _head_revision()
    database = DatabaseStatus(reachable=False, schema_head=head)
    queues: list[QueueStatus] = []
    ctx = runtime.app
    if ctx is None:
        database.error = "the service is starting or stopping"
    else:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(STATUS_DB_TIMEOUT_SEC):
                revision = await ctx.repo.schema_revision()
                stats = await ctx.repo.queue_stats()
                nodes = await ctx.observers.nodes()
        except Exception as exc:  # any failure here means "not ready", which is the answer
            database.error = safe_text(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            log.warning("readiness check: database unavailable", extra={"error": database.error})
        else:
            database.reachable = True
            database.latency_ms = round((time.perf_counter() - started) * 1000, 2)
            database.schema_revision = revision
            database.schema_current = revision == head
            by_queue: dict[str, QueueStatus] = {}
            for row in stats:
                entry = by_queue.setdefault(row["queue"], QueueStatus(
                    queue=row["queue"], counts={}, oldest_runnable_age_sec=None))
                entry.counts[row["status"]] = row["jobs"]
                if row["status"] == "queued":
                    entry.oldest_runnable_age_sec = row["oldest_runnable_age_sec"]
            for node in nodes:
                if node.state == "live":
                    for queue in node.queues:
                        if queue in by_queue:
                            by_queue[queue].served_by.append(node.name)
            for entry in by_queue.values():
                entry.served = bool(entry.served_by)
            queues = list(by_queue.values())
    leader, services = _services(runtime)
    body = StatusResponse(
        status="ok" if database.reachable else "unavailable", version=__version__,
        node=runtime.settings.node_name, database=database, queues=queues, workers=_workers(runtime),
        leader=leader, services=services,
    )
    return JSONResponse(body.model_dump(mode="json"), status_code=200 if database.reachable else 503)


router.add_api_route("/status", status, methods=["HEAD"], include_in_schema=False)
