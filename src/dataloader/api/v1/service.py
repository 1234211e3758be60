"""The HTTP face of jobs: turns JobManager results into response bodies (003 §3 names this module
service.py; the class is JobResponses, since "service" means a background duty here).

Business rules (validation of a job, idempotency, cancel semantics, paging) live in
`dataloader.jobs.manager.JobManager`; this layer only adds what is about HTTP or about this
process (whether one of its workers serves the queue).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from datetime import datetime

from dataloader.api.v1.schemas import (
    JobEvent,
    JobEventsResponse,
    JobListResponse,
    JobStatusResponse,
    JobSummary,
    TriggerBatchRequest,
    TriggerBatchResponse,
    TriggerRequest,
    TriggerResponse,
)
from dataloader.jobs.manager import JobManager, status_view

log = logging.getLogger("dataloader.api")

# Args are logged only when small: a 256 KiB payload per request would drown the log.
MAX_LOGGED_ARGS = 2048


# A producer-only node (serve with no worker for the queue) is common: warn once per queue per
# interval, not on every request (the response header and `served: false` say it every time).
UNSERVED_WARNING_INTERVAL_SEC = 600.0
_unserved_warned_at: dict[str, float] = {}


def _warn_unserved(queue: str, served_queues: frozenset[str]) -> None:
    now = time.monotonic()
    last = _unserved_warned_at.get(queue)
    if last is not None and now - last < UNSERVED_WARNING_INTERVAL_SEC:
        return
    if len(_unserved_warned_at) > 10_000:
        _unserved_warned_at.clear()
    _unserved_warned_at[queue] = now
    log.warning("no worker of this process serves the queue; another replica must (logged once per queue "
                "every 10 minutes)", extra={"queue": queue, "served_queues": sorted(served_queues)})


class JobResponses:
    def __init__(self, jobs: JobManager, served_queues: frozenset[str]) -> None:
        self.jobs = jobs
        self.served_queues = served_queues

    async def trigger(self, req: TriggerRequest, *, request_id: str | None) -> TriggerResponse:
        result = await self.jobs.trigger(req, producer="http", request_id=request_id)
        job = result.job
        served = job.queue in self.served_queues
        if log.isEnabledFor(logging.INFO):  # the line's fields cost an args encoding per request
            args_size = len(json.dumps(req.args))
            log.info(
                "job enqueued" if result.created else (
                    "restartable job re-triggered" if req.restartable
                    else "job already enqueued (unique_for_sec)" if req.unique_for_sec is not None
                    else "job already enqueued (idempotency_key)"),
                extra={
                    "job_id": str(job.id), "queue": job.queue, "task": job.task,
                    "lock_key": job.lock_key, "served": served,
                    # The formatter masks sensitive keys (password, token, ...) inside args.
                    **({"job_args": req.args} if args_size <= MAX_LOGGED_ARGS else {"job_args_size": args_size}),
                },
            )
        if not served:
            _warn_unserved(job.queue, self.served_queues)
        return TriggerResponse(job_id=job.id, status=job.status, created=result.created, served=served)

    async def trigger_batch(self, body: TriggerBatchRequest, *, request_id: str | None) -> TriggerBatchResponse:
        ids = await self.jobs.trigger_many(list(body.jobs), producer="http", request_id=request_id)
        queues = {req.queue for req in body.jobs}
        served = queues <= self.served_queues
        log.info("jobs enqueued (batch)", extra={"inserted": len(ids), "skipped": len(body.jobs) - len(ids),
                                                 "queues": sorted(queues), "served": served})
        return TriggerBatchResponse(job_ids=ids, inserted=len(ids), skipped=len(body.jobs) - len(ids),
                                    served=served)

    async def status(self, job_id: uuid.UUID) -> JobStatusResponse:
        return JobStatusResponse.model_validate(status_view(await self.jobs.get(job_id)))

    async def cancel(self, job_id: uuid.UUID, *, request_id: str | None) -> JobStatusResponse:
        job = await self.jobs.cancel(job_id, request_id=request_id)
        log.info("cancel requested", extra={"job_id": str(job_id), "status": job.status.value})
        return JobStatusResponse.model_validate(status_view(job))

    async def retry(self, job_id: uuid.UUID, *, request_id: str | None) -> JobStatusResponse:
        job = await self.jobs.retry(job_id, request_id=request_id)
        log.info("job retried", extra={"job_id": str(job_id), "attempt": job.attempt})
        return JobStatusResponse.model_validate(status_view(job))

    async def set_priority(self, job_id: uuid.UUID, priority: int, *, request_id: str | None) -> JobSummary:
        return JobSummary.from_job(await self.jobs.set_priority(job_id, priority, request_id=request_id))

    async def delete(self, job_id: uuid.UUID, *, request_id: str | None) -> None:
        await self.jobs.delete(job_id, request_id=request_id)

    async def list(self, *, queue: str | None, task: str | None, statuses: list[str] | None,
                   created_from: datetime | None, created_to: datetime | None, cursor: str | None,
                   limit: int) -> JobListResponse:
        page = await self.jobs.list(
            queue=queue, task=task, statuses=statuses, created_from=created_from, created_to=created_to,
            cursor=cursor, limit=limit,
        )
        return JobListResponse(jobs=[JobSummary.from_job(job) for job in page.jobs], next_cursor=page.next_cursor)

    async def events(self, job_id: uuid.UUID, *, after: int, limit: int) -> JobEventsResponse:
        rows = await self.jobs.events(job_id, after_event_id=after, limit=limit)
        events = [JobEvent.model_validate(row.to_dict()) for row in rows]
        return JobEventsResponse(
            job_id=job_id, events=events, next_after=events[-1].event_id if events else after,
            has_more=len(events) == limit,
        )
