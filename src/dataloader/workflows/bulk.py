"""What a bulk workflow operation does to each run it examines (seed 002's operator-driven
recovery over runs found by search), in its batch's transaction: the single calls of
`app.workflows`, made on the batch's connection, so a run's change and the progress that counts it
commit together or not at all (a runner killed mid-batch: its successor does the batch again, and
nothing was done twice).

- `workflow_cancel`: `WorkflowManager.cancel` — the run and every run below it that has not ended
  (a queued one at once, a running one at its next await; each end counts down its parent's join
  in the same transaction, as every end does). Before it, the jobs of the run's tree are locked
  deepest first, the order a child's end takes them, so a child ending meanwhile and the cancel
  wait for each other in turn instead of deadlocking. A statement that updates several of the
  tree's running jobs at once, in id order (a node's heartbeat, say) can still deadlock with it: that
  is a transient error, the batch rolls back whole and is tried again (run_workflow_batch). A run
  that has ended is skipped.
- `workflow_restart` (`{"from_step": name}`, or `{}`: from the start):
  `WorkflowManager.restart(run, from_step=name)`. A run not ended (queued, running) or that
  succeeded is skipped (looked at first: a run still waiting has not recorded the step yet); one
  with no recorded step of that name is failed (refused, nothing changed),
  with the reason in the audit trail.
- `workflow_retry`: restart from where the run failed — from the first step recorded as failed
  (`restart(run, from_step=its name)`: restart's rule, the first position of that name); a run with
  no failed step (canceled, lost, or failed outside a step) gets the plain retry of its job
  (`app.jobs.retry`): nothing is cut, it replays what it recorded and goes on from there (a run
  given up at its deadline keeps it, and is given up again: restart it from a step to clear it).
  Skipped as for restart.

Each run is judged when its batch reaches it, not at the dry run: a run that ended after the dry
run is canceled if it had not (or skipped), a run restarted by someone else meanwhile is skipped
(it is no longer ended), and a run that failed after the dry run is restarted if the filter still
matches it then.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from dataloader.exceptions import DataloaderError, JobNotRetryable, WorkflowFinished, WorkflowNotFound
from dataloader.jobs.manager import JobManager
from dataloader.storage.executor import InTransaction
from dataloader.storage.operation_repository import RunOutcome
from dataloader.storage.repositories import JobRepository
from dataloader.storage.workflow_repository import WorkflowRepository
from dataloader.workers.pipelines.registry import PipelineRegistry

# Refusals that mean "not eligible now" (skipped); any other DataloaderError is the run's own (failed).
NOT_ELIGIBLE = (JobNotRetryable, WorkflowFinished, WorkflowNotFound)
RESTARTABLE = frozenset({"failed", "canceled", "lost"})


def manager_on(conn: asyncpg.Connection, *, max_args_bytes: int, default_lease_ttl_sec: int) -> Any:
    """A WorkflowManager whose statements run on `conn`, in the caller's transaction."""
    from dataloader.workflows.manager import WorkflowManager
    from dataloader.workflows.registry import workflows

    jobs = JobManager(JobRepository(InTransaction(conn)), PipelineRegistry(),
                      default_lease_ttl_sec=default_lease_ttl_sec, max_args_bytes=max_args_bytes)
    return WorkflowManager(WorkflowRepository(conn), jobs, workflows,  # type: ignore[arg-type]
                           max_args_bytes=max_args_bytes, default_lease_ttl_sec=default_lease_ttl_sec)


def bulk_run_changer(*, max_args_bytes: int, default_lease_ttl_sec: int
                     ) -> Callable[[asyncpg.Connection, str, uuid.UUID, dict[str, Any]], Awaitable[RunOutcome]]:
    """What a bulk workflow operation applies to each run, in its batch's transaction (a savepoint)."""

    async def change(conn: asyncpg.Connection, kind: str, run_id: uuid.UUID, params: dict[str, Any]) -> RunOutcome:
        manager = manager_on(conn, max_args_bytes=max_args_bytes, default_lease_ttl_sec=default_lease_ttl_sec)
        try:
            if kind == "workflow_cancel":
                # the tree's jobs, deepest first, then the run: a child's end takes its own job, then its
                # parent's (the join's wake); taking them in that order too, neither waits for the other twice
                below = await manager.repo.unfinished_descendants(run_id)
                await manager.repo.lock_runs([*reversed(below), run_id])
                await manager.cancel(run_id)
            elif kind == "workflow_restart":
                await _ended(manager, run_id, with_steps=False)
                await manager.restart(run_id, from_step=params.get("from_step"))
            elif kind == "workflow_retry":
                await _retry(manager, await _ended(manager, run_id))
            else:
                raise ValueError(f"not a workflow operation kind: {kind!r}")
        except NOT_ELIGIBLE as exc:
            return RunOutcome("skipped", f"{type(exc).__name__}: {exc}"[:500])
        except DataloaderError as exc:  # ValidationFailed (no such step), RestartNotPossible (a gather)
            return RunOutcome("failed", f"{type(exc).__name__}: {exc}"[:500])
        return RunOutcome("changed")

    return change


async def _ended(manager: Any, run_id: uuid.UUID, *, with_steps: bool = True) -> Any:
    """The run, if it ended in a way a restart takes (failed, canceled, lost); JobNotRetryable
    (skipped) otherwise — before its history is looked at: a run still waiting has not recorded the
    step yet, and is not ended, which is what the operator needs to hear. restart re-checks it
    under the run's row lock."""
    run = await manager.repo.get_run(run_id, with_steps=with_steps)
    if run is None:
        raise WorkflowNotFound(f"no workflow run {run_id}")
    if run.status not in RESTARTABLE:
        raise JobNotRetryable(f"workflow run {run_id} is {run.status}; only a failed, canceled or lost run "
                              "can be restarted")
    return run


async def _retry(manager: Any, run: Any) -> None:
    """Restart from the first step recorded as failed; with none, the run's job retried as a plain
    retry does (it replays its recorded history and goes on from its end)."""
    failed = next((s for s in run.steps if s.kind == "step" and s.state == "failed"), None)
    if failed is not None:
        await manager.restart(run.run_id, from_step=failed.name)
    else:
        await manager.jobs.retry(run.run_id)  # JobNotRetryable if it was retried meanwhile
