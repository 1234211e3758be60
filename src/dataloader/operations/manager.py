"""Bulk operations: requeue, cancel, delete or change the priority of every job matching
a filter, as a tracked operation — an id, the filter, the count a dry run saw, progress (done of
total), pause / resume / cancel, who started it and when, and an audit trail that stays.

The rules live here; the batches are run by the `OperationRunner` service on every node
(`operations/runner.py`), and the statements are `storage/operation_repository.py`'s. What
each kind changes is the single-job API's compare-and-set, applied to a batch:

- requeue: failed, canceled or lost jobs back to the queue with a fresh attempt budget (retry);
  a held job is released by it;
- cancel: queued jobs canceled at once, running ones asked to stop (cancel);
- delete: finished jobs deleted with their journal (never a queued or running one);
- set_priority: queued jobs get the new priority.

A job matched by the filter but no longer eligible when its batch runs (it succeeded meanwhile) is
counted as examined, not changed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from dataloader.exceptions import (
    InvalidJobRequest,
    InvalidProcessRequest,
    OperationNotFound,
    OperationStateConflict,
    ValidationFailed,
)
from dataloader.jobs.manager import PG_INT_MAX, decode_cursor, encode_cursor
from dataloader.jobs.search import JobSearch, filter_error, parse_filter
from dataloader.model.clock import iso
from dataloader.model.job_filter import JobFilter
from dataloader.model.operation import (
    KINDS,
    PROCESS_KINDS,
    STATES,
    WORKFLOW_KINDS,
    DryRun,
    Operation,
    OperationEvent,
)
from dataloader.model.workflow import MAX_STEP_NAME
from dataloader.storage.audit_repository import audited
from dataloader.storage.operation_repository import OperationRepository

if TYPE_CHECKING:
    from dataloader.model.process_selection import ProcessFilter
    from dataloader.model.workflow_selection import RunFilter

MAX_BATCH_SIZE = 10_000
MAX_OPERATIONS_LIMIT = 200
# A workflow operation's batch when none is given: each run is changed in a savepoint of the batch's
# transaction, and past 64 subtransactions that wrote, every snapshot on the server must look their
# ids up in pg_subtrans while the batch is open; 50 keep it under.
RUN_BATCH_SIZE = 50


def check_params(kind: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    if kind not in KINDS:
        raise InvalidJobRequest(f"unknown operation kind {kind!r}; known: {', '.join(KINDS)}")
    params = dict(params or {})
    if kind == "process_restart":
        from dataloader.processes.restart import restart_params

        try:
            return restart_params(params).to_dict()
        except InvalidProcessRequest as exc:
            raise InvalidJobRequest(str(exc)) from None
    if kind == "workflow_restart":
        if set(params) - {"from_step"}:
            raise InvalidJobRequest('workflow_restart takes params {"from_step": a step name} (none: from the start)')
        step = params.get("from_step")
        return {} if step is None else {"from_step": check_from_step(step)}
    if kind == "set_priority":
        priority = params.get("priority")
        if set(params) != {"priority"} or isinstance(priority, bool) or not isinstance(priority, int) \
                or not 0 <= priority <= PG_INT_MAX:
            raise InvalidJobRequest(f"set_priority needs params {{\"priority\": 0..{PG_INT_MAX}}}")
        return {"priority": priority}
    if params:
        raise InvalidJobRequest(f"{kind} takes no params")
    return {}


def run_filter(value: Any) -> RunFilter:
    """A workflow operation's filter (model/workflow_selection.py), its first problem as one
    ValidationFailed naming the field, as a job filter's is."""
    from dataloader.model.workflow_selection import RunFilter

    if isinstance(value, RunFilter):
        return value
    if value is not None and not isinstance(value, Mapping):
        raise ValidationFailed("filter: must be a mapping of workflow, statuses, created_from, created_to, "
                               "top_level", [{"loc": ["filter"], "msg": "must be a mapping", "type": "dict_type"}])
    try:
        return RunFilter.model_validate(dict(value or {}))
    except ValidationError as exc:
        raise filter_error(exc) from None


def check_from_step(value: Any) -> str:
    """A bulk restart's step: a step's name as a run records it (1-200 characters, not blank,
    without NUL). Whether each run recorded it is that run's own matter (failed if not)."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_STEP_NAME or "\x00" in value:
        message = f"must be a step's name: 1-{MAX_STEP_NAME} characters, not blank, without NUL (got {value!r:.100})"
        raise ValidationFailed(f"from_step: {message}", [{"loc": ["from_step"], "msg": message, "type": "value_error"}])
    return value


class OperationManager:
    def __init__(self, repo: OperationRepository, search: JobSearch, *, default_batch_size: int = 500) -> None:
        self.repo = repo
        self.search = search
        self.default_batch_size = default_batch_size

    async def start(self, kind: str, filter: JobFilter | Mapping[str, Any] | None, *,
                    params: Mapping[str, Any] | None = None, started_by: str = "unknown", dry_run: bool = False,
                    batch_size: int | None = None) -> Operation | DryRun:
        """Start a bulk operation (a NOTIFY wakes the runners; one of them takes it at once), or,
        with `dry_run`, only count the jobs it would examine. The filter is the search's."""
        checked_params = check_params(kind, params)
        f: JobFilter | ProcessFilter | RunFilter
        if kind in PROCESS_KINDS:
            f = self._process_filter(filter)
        elif kind in WORKFLOW_KINDS:
            f = run_filter(filter)
        else:
            f = await self.search.checked(filter)
        batch = batch_size or (min(self.default_batch_size, RUN_BATCH_SIZE) if kind in WORKFLOW_KINDS
                               else self.default_batch_size)
        if not 1 <= batch <= MAX_BATCH_SIZE:
            raise InvalidJobRequest(f"batch_size must be between 1 and {MAX_BATCH_SIZE}")
        if not started_by or len(started_by) > 200 or "\x00" in started_by:
            raise InvalidJobRequest("started_by must be 1-200 characters without NUL")
        snapshot = datetime.now(UTC)
        by_status: dict[str, int] | None = None
        sample: list[dict[str, Any]] | None = None
        async with self.search.expensive_slot():
            if isinstance(f, JobFilter):
                total = await self.repo.count(f, snapshot)
            elif kind in WORKFLOW_KINDS:
                by_status = await self.repo.count_runs(f, snapshot)  # type: ignore[arg-type]
                total = sum(by_status.values())
                if dry_run:
                    sample = [{"run_id": str(r["run_id"]), "workflow": r["workflow"], "status": r["status"],
                               "created_at": iso(r["created_at"]),
                               "parent_run_id": None if r["parent_run_id"] is None else str(r["parent_run_id"])}
                              for r in await self.repo.sample_runs(f, snapshot)]  # type: ignore[arg-type]
            else:
                total = await self.repo.count_processes(f, snapshot)  # type: ignore[arg-type]
        if dry_run:
            return DryRun(kind, f.describe(), checked_params, total, by_status, sample)
        operation_id = uuid.uuid4()
        # the operation's own journal (dl_operation_events) goes on; this row links to it by its id
        async with audited(self.repo, "operation.start", "operation", operation_id,
                           {"kind": kind, "filter": f.describe(), "params": checked_params, "total": total,
                            "started_by": started_by}) as change:
            row = await change.repo.create(operation_id, kind, f.describe(), checked_params, total, batch,
                                           started_by, snapshot)
        return Operation.from_row(row)

    @staticmethod
    def _process_filter(filter: Any) -> ProcessFilter:
        from dataloader.model.process_selection import ProcessFilter

        if isinstance(filter, ProcessFilter):
            return filter
        if not isinstance(filter, Mapping):
            raise InvalidJobRequest("a process operation's filter must be a mapping with at least ns")
        try:
            return ProcessFilter.model_validate(dict(filter))
        except ValidationError as exc:
            raise filter_error(exc) from None

    async def get(self, operation_id: uuid.UUID) -> Operation:
        row = await self.repo.get(operation_id)
        if row is None:
            raise OperationNotFound(f"no operation {operation_id}")
        return Operation.from_row(row)

    async def list(self, *, states: list[str] | None = None, cursor: str | None = None, limit: int = 50
                   ) -> tuple[list[Operation], str | None]:
        if not 1 <= limit <= MAX_OPERATIONS_LIMIT:
            raise InvalidJobRequest(f"limit must be between 1 and {MAX_OPERATIONS_LIMIT}")
        unknown = sorted(set(states or ()) - set(STATES))
        if unknown:
            raise InvalidJobRequest(f"unknown state {', '.join(unknown)}; known: {', '.join(STATES)}")
        rows = await self.repo.list(states or None, decode_cursor(cursor) if cursor else None, limit + 1)
        ops = [Operation.from_row(r) for r in rows]
        if len(ops) <= limit:
            return ops, None
        return ops[:limit], encode_cursor(ops[limit - 1].created_at, ops[limit - 1].id)

    async def events(self, operation_id: uuid.UUID) -> list[OperationEvent]:
        await self.get(operation_id)
        return [OperationEvent(r["event_id"], r["ts"], r["kind"], r["actor"], r["payload"])
                for r in await self.repo.events(operation_id)]

    async def pause(self, operation_id: uuid.UUID, *, actor: str = "unknown") -> Operation:
        """Stop after the batch in flight; `resume` continues from the cursor."""
        return await self._set_state(operation_id, "paused", actor, ["running"])

    async def resume(self, operation_id: uuid.UUID, *, actor: str = "unknown") -> Operation:
        return await self._set_state(operation_id, "running", actor, ["paused"])

    async def cancel(self, operation_id: uuid.UUID, *, actor: str = "unknown") -> Operation:
        """End it for good after the batch in flight; what was done stays done."""
        return await self._set_state(operation_id, "canceled", actor, ["running", "paused"])

    async def _set_state(self, operation_id: uuid.UUID, state: str, actor: str, from_states: list[str]) -> Operation:
        verb = {"paused": "pause", "running": "resume", "canceled": "cancel"}[state]
        async with audited(self.repo, f"operation.{verb}", "operation", operation_id, {"actor": actor}) as change:
            previous, changed = await change.repo.set_state(operation_id, state, actor, from_states)
            if previous is None:
                raise OperationNotFound(f"no operation {operation_id}")
            if not changed:
                raise OperationStateConflict(f"operation {operation_id} is {previous}; only an operation that is "
                                             f"{' or '.join(from_states)} can be made {state}")
        return await self.get(operation_id)

    async def wait(self, operation_id: uuid.UUID, *, timeout: float | None = None, interval: float = 0.5) -> Operation:
        """Until the operation ends (finished, canceled or failed); returns it."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            op = await self.get(operation_id)
            if op.ended:
                return op
            if deadline is not None and loop.time() > deadline:
                raise TimeoutError(f"operation {operation_id} is still {op.state} ({op.done}/{op.total})")
            await asyncio.sleep(interval)


__all__ = ["KINDS", "DryRun", "Operation", "OperationEvent", "OperationManager", "parse_filter"]
