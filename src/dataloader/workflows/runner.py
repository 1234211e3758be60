"""The pipeline of a workflow's run jobs (task `workflow:<name>`): replay the run and end its job.

Each attempt reads the run's history and wake count in one snapshot, calls the workflow function
with a fresh `wf`, and ends the job by what happened:
- the function returned: the job succeeds with the value as its result (the run's result);
- it suspended (sleep, wait, join, a step's retry delay): the run remembers the wake count it
  read, then hands the job back as a delayed job (`Snooze`: no attempt used, no worker held). A
  wake that came after the read makes that hand-back due at once (0030's trigger);
- the code and the history disagree, or the function raised: the run fails at once (FatalError:
  a replay would only do the same), its error saying why;
- the database went away: handed back, to replay once it is back (promise 10).

And the pipeline of its step jobs (task `workflow-step:<name>`, context.py's docstring): replay the
run's function up to the step job's position, run the step there, and end the job by what the
step did — succeeded once recorded done (or found recorded already), failed once recorded failed,
retried (`Retry`, an attempt used) after the step's backoff.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from dataloader import metrics
from dataloader.exceptions import FatalError, JobStopped, Retry, Snooze
from dataloader.storage.db import is_connection_error
from dataloader.storage.workflow_repository import WorkflowRepository
from dataloader.workers.outcome import describe
from dataloader.workers.pipelines.context import JobContext
from dataloader.workflows.context import (
    DATABASE_LOST_SUSPEND_SEC,
    DeadlinePassed,
    StepJobEnd,
    StepJobTarget,
    Suspend,
    SyncWorkflow,
    Workflow,
    lease_clock,
)

if TYPE_CHECKING:
    from dataloader.workflows.registry import WorkflowDefinition

log = logging.getLogger("dataloader.workflows")


def pipeline_of(definition: WorkflowDefinition) -> Callable[[JobContext], Awaitable[Any]]:
    async def run(ctx: JobContext) -> Any:
        return await run_workflow(definition, ctx)

    run.__name__ = f"workflow_{definition.name}"
    return run


def step_pipeline_of(definition: WorkflowDefinition) -> Callable[[JobContext], Awaitable[Any]]:
    async def run(ctx: JobContext) -> Any:
        return await run_step_job(definition, ctx)

    run.__name__ = f"workflow_step_{definition.name}"
    return run


def _queue_of(name: str) -> tuple[str, int] | None:
    """A child workflow's queue and attempts, as its registration says."""
    from dataloader.workflows.registry import workflows  # the registry imports this module

    found = workflows.get(name)
    return None if found is None else (found.queue, found.max_attempts)


async def run_workflow(definition: WorkflowDefinition, ctx: JobContext) -> Any:
    if ctx.db is None:
        raise FatalError("a workflow runs only in the engine (it needs the database)")
    repo = WorkflowRepository(ctx.db)
    loaded_at = lease_clock()
    try:
        history = await repo.history(ctx.job_id, ctx.attempt)
    except Exception as exc:
        if is_connection_error(exc):
            raise Snooze(DATABASE_LOST_SUSPEND_SEC) from exc
        raise
    if history is None:
        raise FatalError(f"job {ctx.job_id} is not a workflow run (no dl_workflow_runs row)")

    if history.generation:
        # restarted: the children of the generations it left must not keep running unseen. The
        # restart cancels them itself; this covers a restart cut off before it did, resumed by a
        # plain retry of the run's job (one statement per attempt of a restarted run only)
        try:
            await repo.cancel_stale_children(ctx.job_id)
        except Exception as exc:
            if is_connection_error(exc):
                raise Snooze(DATABASE_LOST_SUSPEND_SEC) from exc
            raise
    wf = Workflow(run_id=ctx.job_id, workflow=definition.name, input=ctx.args.get("input"), attempt=ctx.attempt,
                  history=history, repo=repo, queue_of=_queue_of, lease_ttl_sec=history.lease_ttl_sec, log=ctx.log,
                  loaded_at=loaded_at, queue=ctx.queue)
    try:
        # past its deadline, a step in flight is interrupted at its next await (a sync step's thread
        # runs on to its end; nothing it returns is recorded)
        async with asyncio.timeout(wf.deadline_left()):
            if wf.deadline is not None and (wf.deadline_left() or 0) <= 0:
                raise DeadlinePassed()
            if definition.is_async:
                value = await definition.func(wf, wf.input)
            else:
                loop = asyncio.get_running_loop()
                value = await asyncio.to_thread(definition.func, SyncWorkflow(wf, loop), wf.input)
        wf.check_history_consumed()
    except Suspend as suspended:
        if wf.broken is not None:
            raise FatalError(str(wf.broken)) from None
        metrics.WORKFLOW_SUSPENDS.labels(definition.name, suspended.kind).inc()
        try:
            await repo.mark_seen(ctx.job_id, ctx.attempt, history.wakes)
        except Exception as exc:
            if is_connection_error(exc):
                raise Snooze(DATABASE_LOST_SUSPEND_SEC) from exc
            raise
        left = wf.deadline_left()
        # a sleep, a wait or a join never outlasts the deadline: the run wakes for it, and fails
        raise Snooze(suspended.seconds if left is None else min(suspended.seconds, max(left, 0.0))) from None
    except (DeadlinePassed, TimeoutError) as exc:
        if isinstance(exc, TimeoutError) and not (wf.deadline_left() is not None and wf.deadline_left() <= 0):
            raise FatalError(describe(exc)) from exc  # the workflow's own timeout, not the deadline's
        await _give_up_at_deadline(repo, ctx, definition.name)
    except JobStopped:
        raise  # a cancel or a shutdown: the engine decides
    except Exception as exc:
        if wf.broken is not None:
            raise FatalError(str(wf.broken)) from exc
        raise FatalError(describe(exc)) from exc
    return value



async def _give_up_at_deadline(repo: WorkflowRepository, ctx: JobContext, workflow: str) -> None:
    """The run passed its deadline: its unfinished children are canceled (as a cancel of the run
    cancels them) and the run fails, for good."""
    metrics.WORKFLOW_DEADLINES.labels(workflow).inc()
    try:
        children = await repo.unfinished_descendants(ctx.job_id)
        if children:
            await repo.cancel_runs(children)
    except Exception as exc:
        if is_connection_error(exc):
            raise Snooze(DATABASE_LOST_SUSPEND_SEC) from exc  # decided again once the database is back
        raise
    raise FatalError("the workflow run passed its deadline; its unfinished children were canceled")


async def run_step_job(definition: WorkflowDefinition, ctx: JobContext) -> Any:
    """One attempt of a step job: the run's function replayed up to the job's position (earlier
    positions return what the run recorded; nothing else runs), the step run there, its record
    fenced on this attempt. A position the code no longer reaches with that step is the run's
    HistoryMismatch, and fails the job."""
    if ctx.db is None:
        raise FatalError("a workflow's step job runs only in the engine (it needs the database)")
    try:
        run_id, seq, name = uuid.UUID(str(ctx.args["run_id"])), int(ctx.args["seq"]), str(ctx.args["step"])
    except (KeyError, TypeError, ValueError) as exc:
        raise FatalError(f"job {ctx.job_id} is not a workflow's step job (args run_id, seq, step)") from exc
    repo = WorkflowRepository(ctx.db)
    try:
        run = await repo.get_run(run_id, with_steps=False)
        history = await repo.history(run_id)
    except Exception as exc:
        if is_connection_error(exc):
            raise Snooze(DATABASE_LOST_SUSPEND_SEC) from exc
        raise
    if run is None or history is None or run.finished:
        return None  # the run is gone or has ended (a cancel cancels this job too): nothing waits for the step
    # the step job's own lease decides how long its fence may be trusted (the run's is another job's)
    lease_ttl_sec = int(ctx.args.get("lease_ttl_sec") or history.lease_ttl_sec)
    wf = Workflow(run_id=run_id, workflow=definition.name, input=run.input, attempt=0, history=history,
                  repo=repo, queue_of=_queue_of, lease_ttl_sec=lease_ttl_sec, log=ctx.log,
                  queue=run.queue, step_job=StepJobTarget(ctx.job_id, ctx.attempt, seq, name))
    try:
        if definition.is_async:
            await definition.func(wf, wf.input)
        else:
            loop = asyncio.get_running_loop()
            await asyncio.to_thread(definition.func, SyncWorkflow(wf, loop), wf.input)
    except StepJobEnd:
        pass
    except Suspend as suspended:
        if wf.broken is not None:
            raise FatalError(str(wf.broken)) from None
        # the step job's own job was taken back (its finish is refused anyway), or the database went
        # away: handed back without using an attempt
        raise Snooze(DATABASE_LOST_SUSPEND_SEC if suspended.kind == "database" else 0.0) from None
    except DeadlinePassed:
        raise FatalError("the workflow run passed its deadline; the step was not run") from None
    except JobStopped:
        raise
    except Exception as exc:
        if wf.broken is not None:
            raise FatalError(str(wf.broken)) from exc
        if wf.step_job_outcome is None:
            raise FatalError(f"the code no longer reaches step {name!r} at position {seq} of run {run_id}: "
                             f"it raised {describe(exc)} before it") from exc
    if wf.broken is not None:
        raise FatalError(str(wf.broken))
    outcome = wf.step_job_outcome
    if outcome == "retry":
        raise Retry(after=wf.step_job_retry_in or 0.0, reason=wf.step_job_error)
    if outcome == "failed":
        raise FatalError(wf.step_job_error or f"step {name!r} failed")
    if outcome is None:
        raise FatalError(f"the code no longer reaches step {name!r} at position {seq} of run {run_id}: it "
                         "went another way before it; the step is not run")
    return None
