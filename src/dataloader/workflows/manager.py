"""`app.workflows`: start runs, read them and their results, signal and cancel them.

The same calls serve Python (`App`, `SyncApp`), HTTP (`/api/v1/workflows`) and the CLI
(`dataloader workflows …`), so each face validates alike and raises the same errors.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, Protocol

from dataloader import metrics, tracing
from dataloader.config import Settings
from dataloader.exceptions import (
    ArgsTooLarge,
    JobAlreadyFinished,
    JobNotFound,
    JobNotRetryable,
    TokenNotFound,
    TokenUsed,
    UnknownWorkflow,
    ValidationFailed,
    WorkflowFailed,
    WorkflowFinished,
    WorkflowNotFound,
    WorkflowTimeout,
)
from dataloader.jobs.manager import JobManager, decode_cursor, encode_cursor
from dataloader.model.ids import new_id, uuid_of
from dataloader.model.job import JobStatus
from dataloader.model.storable import encode_json
from dataloader.model.workflow import WorkflowRun, WorkflowRunPage, check_name
from dataloader.storage.audit_repository import audited, audited_as
from dataloader.storage.repositories import NewJob
from dataloader.storage.workflow_repository import WorkflowRepository
from dataloader.workflows.context import MAX_DURATION_SEC
from dataloader.workflows.registry import WorkflowRegistry

# How often `result` looks again when it has no listening session to wait on (a manager built
# without one; the App's has one): it starts fast, most short runs end quickly.
RESULT_POLL_MIN_SEC = 0.02
RESULT_POLL_MAX_SEC = 1.0
MAX_IDEMPOTENCY_KEY = 300
MAX_TOKEN_LENGTH = 100  # a token is 32 characters; anything longer is not one
# A listing's page: every face's default and bound (HTTP's query, the CLI's option, the console).
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 500
RUN_STATUSES = tuple(s.value for s in JobStatus)  # a run's status is its job's


def deadline_seconds(value: float | timedelta | str | None) -> float | None:
    """A run's deadline in seconds from now, checked alike for every face: 1 s to ten years."""
    if value is None:
        return None
    try:
        seconds = value.total_seconds() if isinstance(value, timedelta) else Settings.duration_seconds(value)
    except ValueError as exc:
        raise ValidationFailed(f"deadline: {exc}", [{"loc": ["deadline"], "msg": str(exc), "type": "value_error"}]
                               ) from None
    if seconds != seconds or not 1 <= seconds <= MAX_DURATION_SEC:
        message = f"must be 1 s to ten years ({MAX_DURATION_SEC:.0f} s), got {value!r}"
        raise ValidationFailed(f"deadline: {message}", [{"loc": ["deadline"], "msg": message, "type": "value_error"}])
    return seconds


def run_id_of(value: uuid.UUID | str) -> uuid.UUID:
    """A run id from a UUID or its text; anything else is a validation error naming `run_id`."""
    return uuid_of(value, "run_id")


class RunEndWaiter(Protocol):
    """What `result` waits on: processes/waiter.py's TaskWaiter, which also hears `dl_workflow_end`."""

    async def wait(self, task_id: uuid.UUID, read: Callable[[], Awaitable[Any]], done: Callable[[Any], bool],
                   timeout: float) -> tuple[bool, Any]: ...


class WorkflowManager:
    def __init__(self, repo: WorkflowRepository, jobs: JobManager, registry: WorkflowRegistry, *,
                 max_args_bytes: int, default_lease_ttl_sec: int,
                 waiter: Callable[[], RunEndWaiter] | None = None, operations: Callable[[], Any] | None = None) -> None:
        """`waiter`: the node's waiter on its one listening session, as it is now (it is rebuilt
        when the App is opened again); None: `result` polls. `operations`: the bulk operations
        capability, for cancel_many / restart_many / retry_many (operations/ builds on workflows/,
        so it is handed in rather than imported)."""
        self._operations = operations
        self.repo = repo
        self.waiter = waiter
        self.jobs = jobs
        self.registry = registry
        self.max_args_bytes = max_args_bytes
        self.default_lease_ttl_sec = default_lease_ttl_sec

    async def start(self, workflow: str, input: Any = None, *, idempotency_key: str | None = None,
                    queue: str | None = None, lease_ttl_sec: int | None = None,
                    deadline: float | timedelta | str | None = None) -> uuid.UUID:
        """Start a run of `workflow` with `input` (any JSON); returns its run id (the id of its job).
        A known `idempotency_key` returns that run instead of starting another. `deadline`: how long
        the whole run may take from now (seconds, a timedelta or "90m", "12h", "7d"); past it the run
        fails and its unfinished children are canceled."""
        try:
            check_name("workflow name", workflow)
        except ValueError as exc:
            raise ValidationFailed(str(exc)) from None
        definition = self.registry.get(workflow)
        if definition is None:
            raise UnknownWorkflow(f"no workflow {workflow!r} is registered here "
                                  f"(registered: {', '.join(self.registry.names()) or 'none'})")
        if idempotency_key is not None and (not isinstance(idempotency_key, str) or not idempotency_key
                                            or len(idempotency_key) > MAX_IDEMPOTENCY_KEY):
            raise ValidationFailed(f"idempotency_key must be 1-{MAX_IDEMPOTENCY_KEY} characters")
        if lease_ttl_sec is not None and not 1 <= lease_ttl_sec <= 7 * 86400:
            raise ValidationFailed("lease_ttl_sec must be 1 s to a week")
        deadline_sec = deadline_seconds(deadline)
        text, problem = encode_json({"input": input}, self.max_args_bytes)
        if problem is not None:
            if "larger" in problem or "bytes" in problem:
                raise ArgsTooLarge(f"the workflow's input cannot be stored: {problem}")
            raise ValidationFailed(f"the workflow's input cannot be stored: {problem}")
        run_id = new_id()
        key = None if idempotency_key is None else f"workflow-start:{workflow}:{idempotency_key}"
        job = NewJob(queue=queue or definition.queue, task=definition.task, lock_key=str(run_id),
                     args_json=text or "{}", idempotency_key=key, max_attempts=definition.max_attempts,
                     lease_ttl_sec=lease_ttl_sec or self.default_lease_ttl_sec, producer="workflow", job_id=run_id)
        # the run's trace: every attempt (each replay) is a child of this span
        with tracing.producer_span(f"workflow start {workflow}", {"dataloader.workflow": workflow,
                                                                  "messaging.message.id": str(run_id)}):
            inserted = await self.repo.start([job], [workflow], traceparent=tracing.current_traceparent(),
                                             deadline_sec=deadline_sec)
        if inserted:
            metrics.count_enqueue("enqueued", job.queue, job.task)
            return run_id
        assert key is not None  # an unkeyed insert always inserts
        existing = await self.repo.run_by_key(key)
        if existing is None:  # its job was deleted between the two statements: start again
            return await self.start(workflow, input, idempotency_key=idempotency_key, queue=queue,
                                    lease_ttl_sec=lease_ttl_sec, deadline=deadline)
        return existing

    async def get(self, run_id: uuid.UUID | str) -> WorkflowRun:
        run_id = run_id_of(run_id)
        run = await self.repo.get_run(run_id)
        if run is None:
            raise WorkflowNotFound(f"no workflow run {run_id}")
        return run.shown()  # masked without READ_PAYLOAD

    async def list(self, *, workflow: str | None = None, status: str | None = None,
                   limit: int = DEFAULT_LIST_LIMIT, cursor: str | None = None) -> WorkflowRunPage:
        """Runs newest first (children too), `limit` at a time, without their history; pass the
        page's `next_cursor` for the next page. Filters: a workflow's name, a status (its job's).
        The cursor is a position, not an offset: runs started meanwhile never shift a page."""
        if workflow is not None:
            try:
                check_name("workflow", workflow)
            except ValueError as exc:  # "workflow must be …": it names the field already
                raise ValidationFailed(str(exc), [{"loc": ["workflow"], "msg": str(exc),
                                                   "type": "string_pattern_mismatch"}]) from None
        if status is not None and status not in RUN_STATUSES:
            message = f"unknown status {str(status)[:100]!r}; known: {', '.join(RUN_STATUSES)}"
            raise ValidationFailed(f"status: {message}", [{"loc": ["status"], "msg": message, "type": "enum"}])
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
            message = f"must be a whole number between 1 and {MAX_LIST_LIMIT}"
            raise ValidationFailed(f"limit: {message}", [{"loc": ["limit"], "msg": message, "type": "int_range"}])
        before = decode_cursor(cursor) if cursor else None
        # One row more than asked tells whether another page exists without a count(*).
        runs = await self.repo.list_runs(workflow=workflow, statuses=[status] if status else None, before=before,
                                         limit=limit + 1)
        if len(runs) <= limit:
            return WorkflowRunPage(runs, None)
        last = runs[limit - 1]
        return WorkflowRunPage(runs[:limit], encode_cursor(last.created_at, last.run_id))

    async def result(self, run_id: uuid.UUID | str, *, timeout: float | timedelta = 30.0) -> Any:
        """Wait for the run to end: its result, or WorkflowFailed (failed, canceled or lost), or
        WorkflowTimeout when `timeout` passes first (the run goes on). Waits on the node's listening
        session: the run's end notifies `dl_workflow_end` in its own transaction (migration 0037);
        the run is read once, then again on that notification, on the session's return after a
        loss (what was sent meanwhile was not heard), or on the bounded fallback poll."""
        run_id = run_id_of(run_id)
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)

        async def read() -> WorkflowRun | None:
            return await self.repo.get_run(run_id, with_steps=False)

        def ended(run: WorkflowRun | None) -> bool:
            return run is None or run.finished

        if self.waiter is not None:
            _, run = await self.waiter().wait(run_id, read, ended, max(seconds, 0.0))
        else:  # no listening session to wait on (a manager built alone): poll, backing off
            run = await self._poll(read, ended, seconds)
        if run is None:
            raise WorkflowNotFound(f"no workflow run {run_id}")
        if run.status == "succeeded":
            return run.shown().result  # masked without READ_PAYLOAD
        if run.finished:
            raise WorkflowFailed(f"workflow run {run_id} ended {run.status}: {run.error}", run.status)
        raise WorkflowTimeout(f"workflow run {run_id} is still {run.status} after {seconds:g} s")

    @staticmethod
    async def _poll(read: Callable[[], Awaitable[WorkflowRun | None]], ended: Callable[[WorkflowRun | None], bool],
                    seconds: float) -> WorkflowRun | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        pause = RESULT_POLL_MIN_SEC
        while True:
            run = await read()
            left = deadline - loop.time()
            if ended(run) or left <= 0:
                return run
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, RESULT_POLL_MAX_SEC)

    async def signal(self, run_id: uuid.UUID | str, name: str, payload: Any = None) -> None:
        """Send signal `name` with `payload` (any JSON) to a run that has not ended. Stored: a wait
        for it, now or later, receives it (each signal answers one wait, oldest first)."""
        run_id = run_id_of(run_id)
        try:
            check_name("signal name", name)
        except ValueError as exc:
            raise ValidationFailed(str(exc)) from None
        text, problem = encode_json(payload, self.max_args_bytes)
        if problem is not None:
            raise ValidationFailed(f"the signal's payload cannot be stored: {problem}")
        status, stored = await self.repo.send_signal(run_id, name, text)
        if status is None:
            raise WorkflowNotFound(f"no workflow run {run_id}")
        if not stored:
            raise WorkflowFinished(f"workflow run {run_id} has ended ({status}); the signal was not stored", status)

    async def complete_token(self, token: str, payload: Any = None) -> uuid.UUID:
        """Complete a run's wait token with `payload` (any JSON): the run's `wait_for(token)` gets
        it. Once: a second completion is TokenUsed; a run that has ended, WorkflowFinished; nothing
        is stored then. Returns the run's id."""
        if not isinstance(token, str) or not 1 <= len(token) <= MAX_TOKEN_LENGTH or not token.isascii():
            raise TokenNotFound("no such wait token")  # not ours: says no more than an unknown one
        text, problem = encode_json(payload, self.max_args_bytes)
        if problem is not None:
            raise ValidationFailed(f"the token's payload cannot be stored: {problem}")
        found = await self.repo.complete_token(token, text)
        if found is None:
            raise TokenNotFound("no such wait token")
        run_id, status, stored = found
        if stored:
            metrics.WORKFLOW_TOKENS_COMPLETED.inc()
            return run_id
        if status not in ("queued", "running"):
            raise WorkflowFinished(f"workflow run {run_id} has ended ({status}); the token's payload was not stored",
                                   status)
        raise TokenUsed("the wait token was completed already; a token answers once")

    async def cancel(self, run_id: uuid.UUID | str) -> WorkflowRun:
        """Cancel a run and every run below it that has not ended: a queued one (sleeping, waiting,
        joining) at once, a running one at its next await."""
        run_id = run_id_of(run_id)
        # one row for the run and its children, written with the first cancel that changes something
        async with audited_as(self.repo, "workflow.cancel", "workflow_run", run_id):
            run = await self.get(run_id)
            if run.finished:
                raise WorkflowFinished(f"workflow run {run_id} has ended ({run.status}); nothing to cancel",
                                       run.status)
            # the run first: it must not start more children while these are canceled
            await self._cancel_job(run_id)
            for child in await self.repo.unfinished_descendants(run_id):
                await self._cancel_job(child)
        return await self.get(run_id)

    async def restart(self, run_id: uuid.UUID | str, *, from_step: str | None = None) -> WorkflowRun:
        """Run an ended run (failed, canceled or lost) again from step `from_step` (its first
        position of that name; None: from the start), e.g. with fixed code: the history from
        there on is removed (the signals its waits took are freed), and the run's job is retried
        with a fresh attempt budget. Steps before it keep their results and are not run again.
        A gather cut this way starts new children on the replay, which join anew; the children of
        the run's earlier generation are canceled if they had not ended, and their ends count in
        no join. Refused (nothing changed) for a run that has not ended and for an unknown step.

        In three parts, each safe to be cut off after: the cut (one statement: history, generation,
        journal — from here the old children count nothing), the cancel of the old children, the
        retry. A run cut off after the first or second part is an ended run with a shorter
        history, which a second restart resumes, or a plain retry of its job (its replay cancels
        the old children that are left before it runs)."""
        # one row, written with the cut (the change that makes the restart); the cancels and the retry
        # after it are parts of this action and write none of their own
        async with audited_as(self.repo, "workflow.restart", "workflow_run", run_id, {"from_step": from_step}):
            run = await self.get(run_id)
            from_seq = 1
            if from_step is not None:
                found = next((s.seq for s in run.steps if s.name == from_step and s.kind == "step"), None)
                if found is None:
                    message = f"workflow run {run.run_id} has no recorded step {from_step!r}"
                    raise ValidationFailed(message, [{"loc": ["from_step"], "msg": message, "type": "value_error"}])
                from_seq = found
            async with audited(self.repo, "workflow.restart", "workflow_run", run.run_id) as change:
                row = await change.repo.restart_cut(run.run_id, from_seq)
                if row is None:
                    raise WorkflowNotFound(f"no workflow run {run.run_id}")
                if row["status"] not in ("failed", "canceled", "lost"):
                    raise JobNotRetryable(f"workflow run {run.run_id} is {row['status']}; only a failed, canceled "
                                          "or lost run can be restarted")
            # before the retry: the replay must not find an old child still running beside its new ones
            for child in await self.repo.stale_children(run.run_id):
                await self._cancel_job(child)
            try:
                await self.jobs.retry(run.run_id)
            except JobNotRetryable:
                pass  # retried by someone else since the cut: it replays from the cut all the same
        return await self.get(run.run_id)

    async def _cancel_job(self, job_id: uuid.UUID) -> None:
        try:
            await self.jobs.cancel(job_id)
        except (JobAlreadyFinished, JobNotFound):
            pass  # it ended (or was pruned) meanwhile: nothing left to cancel

    # -- bulk: the runs a search finds, as a tracked operation (workflows/bulk.py, docs/operations.md) --

    async def cancel_many(self, filter: Mapping[str, Any] | None = None, *, started_by: str = "unknown",
                          dry_run: bool = False, batch_size: int | None = None) -> Any:
        """Cancel every run the filter matches (workflow, statuses, created_from / created_to,
        top_level; model/workflow_selection.py) as a tracked bulk operation (`app.operations` shows,
        pauses, resumes, cancels it): each run as `cancel` does, with every run below it that has not
        ended. A run that has ended when its batch comes is skipped. `dry_run`: only count them
        (by status, with a sample)."""
        return await self._bulk("workflow_cancel", filter, None, started_by, dry_run, batch_size)

    async def restart_many(self, filter: Mapping[str, Any] | None = None, from_step: str | None = None, *,
                           started_by: str = "unknown", dry_run: bool = False, batch_size: int | None = None) -> Any:
        """Restart every run the filter matches from step `from_step` (None: from the start), as
        `restart` does, as a tracked bulk operation. A run not ended (or succeeded) when its batch
        comes is skipped; one that never recorded that step, or has a gather in the way, is failed
        (nothing changed), with the reason in the operation's audit trail."""
        return await self._bulk("workflow_restart", filter, {"from_step": from_step}, started_by, dry_run, batch_size)

    async def retry_many(self, filter: Mapping[str, Any] | None = None, *, started_by: str = "unknown",
                         dry_run: bool = False, batch_size: int | None = None) -> Any:
        """Run every matched ended run again from where it failed (its first failed step; a run with
        none: its job retried, replaying its history), as a tracked bulk operation; skipped and
        failed as for restart_many."""
        return await self._bulk("workflow_retry", filter, None, started_by, dry_run, batch_size)

    async def _bulk(self, kind: str, filter: Any, params: dict[str, Any] | None, started_by: str, dry_run: bool,
                    batch_size: int | None) -> Any:
        if self._operations is None:
            raise RuntimeError("this WorkflowManager was built without the operations service")
        return await self._operations().start(kind, filter, params=params, started_by=started_by, dry_run=dry_run,
                                              batch_size=batch_size)
