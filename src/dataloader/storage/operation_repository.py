"""Statements of recovery and bulk operations: the queue-time check, and the tracked
operations with their batches. Statements in `queries/operations/`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import asyncpg

from dataloader.exceptions import DataloaderError
from dataloader.model.job_filter import JobFilter
from dataloader.storage.queries import sql
from dataloader.storage.search_repository import begin_count, count_matches, filter_params

if TYPE_CHECKING:
    from dataloader.model.process_selection import ProcessFilter
    from dataloader.model.workflow_selection import RunFilter

# Changes one process of a process operation in the batch's transaction: (conn, ns, id, params) ->
# changed; raises a DataloaderError when the process is not eligible.
MAX_SKIPS_AUDITED = 100  # per batch: the audit says which processes were skipped and why
ApplyToProcess = Callable[[asyncpg.Connection, str, str, dict[str, Any]], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What a workflow operation did to one run: `changed`, `skipped` (no longer eligible: a run
    not ended for a restart, ended for a cancel) or `failed` (refused for a reason of its own: a
    step it never recorded, a gather in the way), with the reason of the last two."""

    outcome: str
    reason: str | None = None


# Changes one run of a workflow operation in the batch's transaction: (conn, kind, run id, params).
ApplyToRun = Callable[[asyncpg.Connection, str, uuid.UUID, dict[str, Any]], Awaitable[RunOutcome]]
# Errors a workflow operation's batch is tried again for (rolled back whole), not a run's refusal.
TRANSIENT = (asyncpg.DeadlockDetectedError, asyncpg.LockNotAvailableError, asyncpg.SerializationError,
             asyncpg.QueryCanceledError, asyncpg.PostgresConnectionError, asyncpg.InsufficientResourcesError,
             asyncpg.OperatorInterventionError)
SAMPLE_RUNS = 10  # a workflow operation's dry run shows this many of the runs it would examine


class QueueTimeRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def flag_overdue(self, limits: dict[str, tuple[float, bool]], default_limit: float, default_fail: bool,
                           batch_size: int, lookback_sec: float | None) -> list[asyncpg.Record]:
        queues = sorted(limits)
        return await self.pool.fetch(
            sql("operations/flag_overdue"), queues, [limits[q][0] for q in queues], [limits[q][1] for q in queues],
            default_limit, default_fail, batch_size, lookback_sec)


APPLY = {"requeue": "operations/apply_requeue", "cancel": "operations/apply_cancel",
         "delete": "operations/apply_delete", "set_priority": "operations/apply_set_priority"}


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What one batch did: jobs examined (matched the filter after the cursor), jobs changed (the
    rest were no longer eligible: skipped), whether the operation is finished, and its row after."""

    examined: int
    changed: int
    finished: bool
    row: asyncpg.Record | None  # None: the runner no longer holds the operation (nothing was done)
    failed: int = 0  # of the examined, refused for a reason of their own (a workflow operation's)


class OperationRepository:
    def __init__(self, pool: asyncpg.Pool, *, count_timeout_sec: float | None = None) -> None:
        self.pool = pool
        self.count_timeout_sec = count_timeout_sec  # an operation's dry run and total (the API's)

    async def count(self, f: JobFilter, snapshot: datetime) -> int:
        """Jobs the operation would examine: the filter's matches created up to the snapshot."""
        async with self.pool.acquire() as conn, conn.transaction(readonly=True):
            await begin_count(conn, self.count_timeout_sec)
            # created_to is exclusive and the snapshot inclusive: a job created at the very
            # snapshot instant would be examined but not counted (total is a progress estimate).
            return await count_matches(conn, f, None, created_until=snapshot)

    async def create(self, operation_id: uuid.UUID, kind: str, filter_json: dict[str, Any], params: dict[str, Any],
                     total: int, batch_size: int, started_by: str, snapshot: datetime) -> asyncpg.Record:
        return await self.pool.fetchrow(sql("operations/create"), operation_id, kind, filter_json, params, total,
                                        batch_size, started_by, snapshot)

    async def claim(self, owner: str, lease_sec: float) -> asyncpg.Record | None:
        return await self.pool.fetchrow(sql("operations/claim"), owner, lease_sec)

    async def next_lease_expiry_in(self) -> float | None:
        """Seconds until the soonest lease of a running operation runs out (None: none is running)."""
        return await self.pool.fetchval(sql("operations/next_lease_expiry"))

    async def run_batch(self, operation_id: uuid.UUID, owner: str, epoch: int, lease_sec: float,
                        parse_filter: Callable[[Any], JobFilter]) -> BatchResult:
        """One batch in one transaction: lock the operation (still ours), pick the next ids after
        its cursor, apply its change with the single-job compare-and-set, advance the cursor and
        the counts. All or nothing: a crash anywhere leaves the cursor where the jobs are."""
        async with self.pool.acquire() as conn, conn.transaction():
            op = await _lock_for_batch(conn, operation_id, owner, epoch)
            if op is None:
                return BatchResult(0, 0, False, None)
            f = parse_filter(op["filter"])
            queues, tasks, statuses, error, c_from, c_to, f_from, f_to, contains, path, prefix, held = \
                filter_params(f)
            ids = await conn.fetch(sql("operations/batch_ids"), queues, tasks, statuses, error, c_from, c_to, f_from,
                                   f_to, contains, path, prefix, held, op["snapshot_at"], op["cursor_created_at"],
                                   op["cursor_job_id"], op["batch_size"])
            job_ids = [r["job_id"] for r in ids]
            changed = 0
            if job_ids:
                changed = await self._apply(conn, op["kind"], job_ids, operation_id, op["params"])
            last = ids[-1] if ids else None
            finished = len(ids) < op["batch_size"]
            row = await _advance(conn, operation_id, examined=len(ids), changed=changed, lease_sec=lease_sec,
                                 finished=finished, cursor_created_at=last["created_at"] if last else None,
                                 cursor_job_id=last["job_id"] if last else None)
        return BatchResult(len(ids), changed, finished, row)

    async def count_processes(self, f: ProcessFilter, snapshot: datetime) -> int:
        ns, statuses, ids, detail = f.params()
        return await self.pool.fetchval(sql("processes/select_count"), ns, statuses, ids, detail, snapshot)

    async def run_process_batch(self, operation_id: uuid.UUID, owner: str, epoch: int, lease_sec: float,
                                apply: ApplyToProcess) -> BatchResult:
        """A batch of a process operation, like run_batch: its ids after the cursor, `apply` to each
        (True: changed) in its own savepoint, so a process that cannot be changed (busy, no state to
        go back to, an odd row) is counted as skipped and never undoes its neighbours."""
        from dataloader.model.process_selection import ProcessFilter

        async with self.pool.acquire() as conn, conn.transaction():
            op = await _lock_for_batch(conn, operation_id, owner, epoch)
            if op is None:
                return BatchResult(0, 0, False, None)
            f = ProcessFilter.model_validate(op["filter"])
            ns, statuses, only_ids, detail = f.params()
            rows = await conn.fetch(sql("processes/select_batch"), ns, statuses, only_ids, detail, op["snapshot_at"],
                                    op["cursor_process_id"], op["batch_size"])
            ids = [r["id"] for r in rows]
            changed = 0
            skipped: list[dict[str, str]] = []
            for process_id in ids:
                try:
                    async with conn.transaction():
                        changed += bool(await apply(conn, f.ns, process_id, op["params"]))
                except (DataloaderError, asyncpg.PostgresError) as exc:
                    # not eligible now (busy, nothing to go back to), or a row this statement cannot
                    # handle: skipped, as a job no longer eligible is, and said in the audit trail
                    if len(skipped) < MAX_SKIPS_AUDITED:
                        skipped.append({"id": process_id, "reason": f"{type(exc).__name__}: {exc}"[:500]})
            if skipped:
                await _audit(conn, operation_id, "skipped", {"processes": skipped})
            finished = len(ids) < op["batch_size"]
            row = await _advance(conn, operation_id, examined=len(ids), changed=changed, lease_sec=lease_sec,
                                 finished=finished, cursor_process_id=ids[-1] if ids else None)
        return BatchResult(len(ids), changed, finished, row)

    async def count_runs(self, f: RunFilter, snapshot: datetime) -> dict[str, int]:
        """Runs a workflow operation would examine, by status (its total is their sum)."""
        async with self.pool.acquire() as conn, conn.transaction(readonly=True):
            await begin_count(conn, self.count_timeout_sec)
            workflow, statuses, c_from, c_to, top_level = f.params()
            rows = await conn.fetch(sql("workflows/select_count"), workflow, statuses, c_from, c_to, top_level,
                                    snapshot)
        return {r["status"]: r["runs"] for r in rows}

    async def sample_runs(self, f: RunFilter, snapshot: datetime, limit: int = SAMPLE_RUNS) -> list[asyncpg.Record]:
        async with self.pool.acquire() as conn, conn.transaction(readonly=True):
            await begin_count(conn, self.count_timeout_sec)
            workflow, statuses, c_from, c_to, top_level = f.params()
            return await conn.fetch(sql("workflows/select_sample"), workflow, statuses, c_from, c_to, top_level,
                                    snapshot, limit)

    async def run_workflow_batch(self, operation_id: uuid.UUID, owner: str, epoch: int, lease_sec: float,
                                 apply: ApplyToRun) -> BatchResult:
        """A batch of a workflow operation, like run_process_batch: its runs after the cursor, `apply`
        to each in its own savepoint and in the batch's transaction, so a run's change, the
        progress that counts it and the audit row naming it ('changed') commit together (a runner
        killed mid-batch leaves all undone, and its successor does the batch again: nothing twice).
        A refusal (a DataloaderError) undoes that run's savepoint only and is counted skipped or
        failed, with its reason in the audit trail; any other error (a lock timeout, a lost
        connection) rolls the batch back whole."""
        from dataloader.model.workflow_selection import RunFilter

        async with self.pool.acquire() as conn, conn.transaction():
            op = await _lock_for_batch(conn, operation_id, owner, epoch)
            if op is None:
                return BatchResult(0, 0, False, None)
            f = RunFilter.model_validate(op["filter"])
            workflow, statuses, c_from, c_to, top_level = f.params()
            rows = await conn.fetch(sql("workflows/select_batch"), workflow, statuses, c_from, c_to, top_level,
                                    op["snapshot_at"], op["cursor_created_at"], op["cursor_job_id"], op["batch_size"])
            changed = failed = 0
            noted: list[dict[str, str]] = []
            changed_runs: list[str] = []
            for row in rows:
                try:
                    async with conn.transaction():
                        result = await apply(conn, op["kind"], row["run_id"], op["params"])
                        if result.outcome != "changed":
                            raise _Undo(result)
                except _Undo as undo:
                    result = undo.result
                except asyncpg.PostgresError as exc:
                    if isinstance(exc, TRANSIENT):
                        raise  # the batch again, after a pause: this run may well pass then
                    # a row this statement cannot handle: refused, as a process's is, not retried forever
                    result = RunOutcome("failed", f"{type(exc).__name__}: {exc}"[:500])
                changed += result.outcome == "changed"
                failed += result.outcome == "failed"
                if result.outcome == "changed":
                    changed_runs.append(str(row["run_id"]))
                if result.reason is not None and len(noted) < MAX_SKIPS_AUDITED:
                    noted.append({"run_id": str(row["run_id"]), "outcome": result.outcome, "reason": result.reason})
            if noted:
                await _audit(conn, operation_id, "skipped", {"runs": noted})
            if changed_runs:  # who changed these runs: the run's own journal rows do not name the operation
                await _audit(conn, operation_id, "changed", {"runs": changed_runs})
            last = rows[-1] if rows else None
            finished = len(rows) < op["batch_size"]
            row = await _advance(conn, operation_id, examined=len(rows), changed=changed, failed=failed,
                                 lease_sec=lease_sec, finished=finished,
                                 cursor_created_at=last["created_at"] if last else None,
                                 cursor_job_id=last["run_id"] if last else None)
        return BatchResult(len(rows), changed, finished, row, failed)

    @staticmethod
    async def _apply(conn: asyncpg.Connection, kind: str, job_ids: list[uuid.UUID], operation_id: uuid.UUID,
                     params: dict[str, Any]) -> int:
        if kind == "requeue":
            return await conn.fetchval(sql("operations/apply_requeue"), job_ids, operation_id)
        if kind == "cancel":
            return await conn.fetchval(sql("operations/apply_cancel"), job_ids, operation_id)
        if kind == "delete":
            return await conn.fetchval(sql("operations/apply_delete"), job_ids, operation_id)
        if kind == "set_priority":
            return await conn.fetchval(sql("operations/apply_set_priority"), job_ids, operation_id,
                                       int(params["priority"]))
        raise ValueError(f"unknown operation kind {kind!r}")

    async def release(self, operation_id: uuid.UUID, owner: str, epoch: int) -> bool:
        return await self.pool.fetchval(sql("operations/release"), operation_id, owner, epoch) is not None

    async def fail(self, operation_id: uuid.UUID, owner: str, epoch: int, error: str) -> bool:
        return await self.pool.fetchval(sql("operations/fail"), operation_id, owner, epoch, error) is not None

    async def set_state(self, operation_id: uuid.UUID, state: str, actor: str, from_states: list[str]
                        ) -> tuple[str | None, bool]:
        row = await self.pool.fetchrow(sql("operations/set_state"), operation_id, state, actor, from_states)
        return (None, False) if row is None else (row["previous_state"], row["changed"])

    async def get(self, operation_id: uuid.UUID) -> asyncpg.Record | None:
        return await self.pool.fetchrow(sql("operations/get"), operation_id)

    async def list(self, states: list[str] | None, before: tuple[datetime, uuid.UUID] | None, limit: int
                   ) -> list[asyncpg.Record]:
        before_at, before_id = before if before is not None else (None, None)
        return await self.pool.fetch(sql("operations/list"), states, before_at, before_id, limit)

    async def events(self, operation_id: uuid.UUID) -> list[asyncpg.Record]:
        return await self.pool.fetch(sql("operations/events"), operation_id)


async def _lock_for_batch(conn: asyncpg.Connection, operation_id: uuid.UUID, owner: str, epoch: int
                          ) -> asyncpg.Record | None:
    """A batch's first statements, in its transaction: its settings, then the operation locked if
    it is still running and ours (None: it is not)."""
    await conn.execute(sql("operations/batch_settings"))
    return await conn.fetchrow(sql("operations/lock_for_batch"), operation_id, owner, epoch)


async def _audit(conn: asyncpg.Connection, operation_id: uuid.UUID, kind: str, payload: dict[str, Any]) -> None:
    """audit.sql: a batch's 'skipped' row (what it did not change and why) or a workflow batch's
    'changed' row (the runs it changed), in the batch's transaction."""
    await conn.execute(sql("operations/audit"), operation_id, kind, json.dumps(payload, ensure_ascii=False))


class _Undo(Exception):
    """Leaves a run's savepoint undone (whatever its refusal wrote before it refused), carrying why."""

    def __init__(self, result: RunOutcome) -> None:
        super().__init__(result.reason)
        self.result = result


async def _advance(conn: asyncpg.Connection, operation_id: uuid.UUID, *, examined: int, changed: int,
                   lease_sec: float, finished: bool, cursor_created_at: datetime | None = None,
                   cursor_job_id: uuid.UUID | None = None, cursor_process_id: str | None = None,
                   failed: int = 0) -> asyncpg.Record:
    """advance.sql: the end of a batch (a job or run operation's cursor, or a process operation's)."""
    return await conn.fetchrow(sql("operations/advance"), operation_id, cursor_created_at, cursor_job_id, examined,
                               changed, lease_sec, finished, cursor_process_id, failed)
