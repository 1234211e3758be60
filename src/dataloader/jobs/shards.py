"""Jobs over several shards (docs/scaling.md "Past one primary"): one `JobManager` per shard, and
the routing between them. A job lives on the shard of its queue (`Settings.shard_of`), so an
enqueue goes to exactly one shard; a job id carries no shard, so a read, cancel or retry by id asks
every shard at once and takes the one that has it; a list merges the shards' pages newest first.

With one shard the App uses its `JobManager` directly and none of this runs.
"""

from __future__ import annotations

import asyncio
import heapq
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from dataloader.exceptions import ChainNotFound, InvalidJobRequest, JobNotFound, ValidationFailed
from dataloader.jobs.manager import MAX_LIST_LIMIT, JobManager, JobRequest, TriggerResult, decode_cursor, encode_cursor
from dataloader.jobs.search import JobSearch, SearchPage, check_at_most
from dataloader.model.job import Chain, Job, JobEvent, JobPage
from dataloader.model.job_filter import JobFilter
from dataloader.model.queue_depth import QueueDepth
from dataloader.storage.audit_repository import audited_as
from dataloader.storage.executor import Executor

T = TypeVar("T")


def queue_of(item: JobRequest | Mapping[str, Any]) -> str:
    """The queue of one batch item (a plain item without one goes to `default`, as batch_columns says)."""
    return item.queue if isinstance(item, JobRequest) else str(item.get("queue", "default"))


async def first_found(shards: Sequence[str], ask: Callable[[str], Awaitable[T]],
                      missing: type[Exception] = JobNotFound) -> T:
    """`ask(shard)` on every shard at once; the answer of the one that has it. Ids are UUIDv7
    made by one node or another, so at most one shard has a given id; when none has it, the
    default shard's `missing` error is raised. Any other error (a shard that is down) is raised:
    a job that may be on the unreachable shard is not reported as missing."""
    results = await asyncio.gather(*(ask(shard) for shard in shards), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, missing):
            raise result
    for result in results:
        if not isinstance(result, BaseException):
            return result
    raise results[0]  # type: ignore[misc]


def merge_newest_first(pages: Sequence[Sequence[Job]], limit: int) -> tuple[list[Job], str | None]:
    """Each shard's page (newest first, up to limit + 1 rows after the same cursor) merged into one
    page of `limit` and the cursor after it: the cursor is (created_at, id), a position every shard
    understands, so the next page asks every shard again from there."""
    merged = list(heapq.merge(*pages, key=lambda j: (j.created_at, j.id), reverse=True))
    if len(merged) <= limit:
        return merged, None
    page = merged[:limit]
    return page, encode_cursor(page[-1].created_at, page[-1].id)


class ShardedJobManager:
    """The JobManager interface over several shards (the default one first)."""

    def __init__(self, managers: Mapping[str, JobManager], shard_of: Callable[[str], str]) -> None:
        self.managers = dict(managers)
        self.shard_of = shard_of
        self.default = next(iter(self.managers.values()))

    @property
    def served_queues(self) -> Callable[[], frozenset[str]]:
        return self.default.served_queues

    @served_queues.setter
    def served_queues(self, value: Callable[[], frozenset[str]]) -> None:
        # The CLI answers for its service's queues (cli/common.py): every shard's manager does.
        for manager in self.managers.values():
            manager.served_queues = value

    @property
    def registry(self) -> Any:
        return self.default.registry

    def manager_for(self, queue: str) -> JobManager:
        return self.managers[self.shard_of(queue)]

    def check_task(self, task: str, queue: str, served: frozenset[str] | None = None) -> None:
        self.default.check_task(task, queue, served)

    async def trigger(self, req: JobRequest, **options: Any) -> TriggerResult:
        shard = self.shard_of(req.queue)
        for stage in req.then:
            if self.shard_of(stage.queue or req.queue) != shard:
                # A stage is enqueued by the finishing job in its own database's transaction.
                raise InvalidJobRequest(f"then: stage queue {stage.queue!r} is on shard "
                                        f"{self.shard_of(stage.queue or req.queue)!r}, the job's queue "
                                        f"{req.queue!r} on {shard!r}: a chain stays on one shard")
        return await self.managers[shard].trigger(req, **options)

    async def trigger_many(self, reqs: Sequence[JobRequest | Mapping[str, Any]], *, producer: str | None = None,
                           on: Executor | None = None, request_id: str | None = None) -> list[uuid.UUID]:
        """One statement per shard the batch touches. Every item is checked before any shard
        inserts (bad input writes nothing); the shards' inserts are separate transactions."""
        groups: dict[str, list[int]] = {}
        for index, item in enumerate(reqs):
            groups.setdefault(self.shard_of(queue_of(item)), []).append(index)
        if len(groups) <= 1:
            shard = next(iter(groups), next(iter(self.managers)))
            return await self.managers[shard].trigger_many(reqs, producer=producer, on=on,
                                                           request_id=request_id)
        if on is not None:
            raise InvalidJobRequest(f"the jobs of one enqueue in your transaction (conn=) must live on one "
                                    f"shard; these are on {', '.join(sorted(groups))}")
        batches = {shard: self.managers[shard].batch_columns([reqs[i] for i in positions])
                   for shard, positions in groups.items()}
        inserted = await asyncio.gather(*(self.managers[shard].insert_batch(batch, producer, request_id=request_id)
                                          for shard, batch in batches.items()))
        position = {job_id: groups[shard][k] for shard, batch in batches.items() for k, job_id in enumerate(batch.ids)}
        return sorted((job_id for ids in inserted for job_id in ids), key=position.__getitem__)

    async def get(self, job_id: uuid.UUID) -> Job:
        return await first_found(list(self.managers), lambda s: self.managers[s].get(job_id))

    # One audit row for the one shard that has the job, not a refusal from each shard asked before it.
    async def cancel(self, job_id: uuid.UUID, *, request_id: str | None = None) -> Job:
        async with audited_as(self.default.repo, "job.cancel", "job", job_id):
            return await first_found(list(self.managers),
                                     lambda s: self.managers[s].cancel(job_id, request_id=request_id))

    async def retry(self, job_id: uuid.UUID, *, request_id: str | None = None) -> Job:
        async with audited_as(self.default.repo, "job.retry", "job", job_id):
            return await first_found(list(self.managers),
                                     lambda s: self.managers[s].retry(job_id, request_id=request_id))

    async def events(self, job_id: uuid.UUID, *, after_event_id: int = 0, limit: int = 1000) -> list[JobEvent]:
        return await first_found(list(self.managers), lambda s: self.managers[s].events(
            job_id, after_event_id=after_event_id, limit=limit))

    async def chain(self, chain_or_job_id: uuid.UUID, **options: Any) -> Chain:
        return await first_found(list(self.managers), lambda s: self.managers[s].chain(chain_or_job_id, **options),
                                 ChainNotFound)

    async def where(self, job_id: uuid.UUID) -> str:
        """The shard that has the job (JobNotFound when none has it)."""
        async def ask(shard: str) -> str:
            await self.managers[shard].get(job_id)
            return shard
        return await first_found(list(self.managers), ask)

    async def queue_depths(self) -> list[QueueDepth]:
        """Every shard's depths, each named with its shard, sorted by queue."""
        answers = await asyncio.gather(*(m.queue_depths() for m in self.managers.values()))
        rows = [depth.on_shard(shard) for shard, depths in zip(self.managers, answers, strict=True)
                for depth in depths]
        return sorted(rows, key=lambda d: (d.queue, d.shard or ""))

    async def list(self, *, limit: int = 100, cursor: str | None = None, **filters: Any) -> JobPage:
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidJobRequest(f"limit must be between 1 and {MAX_LIST_LIMIT}")
        if cursor:
            decode_cursor(cursor)  # a bad cursor is one error, not one per shard
        pages = await asyncio.gather(*(m.list(limit=limit, cursor=cursor, **filters) for m in self.managers.values()))
        # A shard's page of `limit` with a cursor after it may have more: ask it for limit + 1 by
        # keeping every row it gave and letting the merge cut; a page without next_cursor is whole.
        jobs, next_cursor = merge_newest_first([p.jobs for p in pages], limit)
        if next_cursor is None and any(p.next_cursor for p in pages):
            last = jobs[-1]
            next_cursor = encode_cursor(last.created_at, last.id)
        return JobPage(jobs, next_cursor)


def merge_search_pages(pages: Sequence[SearchPage], limit: int) -> SearchPage:
    """The shards' search pages as one: newest first, counts added (capped if any was)."""
    jobs, next_cursor = merge_newest_first([p.jobs for p in pages], limit)
    if next_cursor is None and any(p.next_cursor for p in pages):
        next_cursor = encode_cursor(jobs[-1].created_at, jobs[-1].id)
    counts = [p.count for p in pages]
    total = None if any(c is None for c in counts) else sum(c for c in counts if c is not None)
    return SearchPage(jobs, next_cursor, total, any(p.count_capped for p in pages), pages[0].filter)


class ShardedSearch:
    """Search and counts over every shard (`JobSearch`'s two calls): each shard's own search,
    unbounded, inside one slot of the first's bound, so a fan-out costs one expensive query of the
    HTTP API's budget, as on one shard. Pages merge newest first; counts add up."""

    def __init__(self, bounded: JobSearch, shards: Sequence[JobSearch]) -> None:
        self.bounded = bounded
        self.shards = shards

    async def search(self, value: JobFilter | Mapping[str, Any] | None = None, *, cursor: str | None = None,
                     limit: int = 100, count: bool = False) -> SearchPage:
        async with self.bounded.expensive_slot():
            pages = await asyncio.gather(*(s.search(value, cursor=cursor, limit=limit, count=count)
                                           for s in self.shards))
        return merge_search_pages(pages, limit)

    async def count(self, value: JobFilter | Mapping[str, Any] | None = None, *, at_most: int | None = None) -> int:
        check_at_most(at_most)
        async with self.bounded.expensive_slot():
            counts = await asyncio.gather(*(s.count(value, at_most=at_most) for s in self.shards))
        total = sum(counts)
        return min(total, at_most) if at_most is not None else total


def check_schedule_shard(queue: str, shard_of: Callable[[str], str], default: str) -> None:
    """A schedule's queue must be on the default shard, whose scheduler enqueues its ticks into its
    own database (docs/scaling.md "Past one primary")."""
    shard = shard_of(queue)
    if shard != default:
        raise ValidationFailed(f"queue: {queue!r} lives on shard {shard!r}; schedules live on the default "
                               "shard and enqueue there (docs/scaling.md)",
                               [{"loc": ["queue"], "msg": f"lives on shard {shard!r}", "type": "value_error"}])
