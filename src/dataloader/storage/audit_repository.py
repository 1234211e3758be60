"""The audit trail's writes and reads (dl_audit, migration 0043; DESIGN.md promise 14).

A change and its audit row commit together or not at all. Most changes were one statement on the
pool; `audited` opens one transaction on the pool of the repository that makes the change, hands
the manager that repository bound to the transaction (`within`: its statements, and any
transaction it opens itself, which becomes a savepoint, run there), and writes the row in the same
transaction before it commits. A change whose statement fails rolls back with no row; one refused
by a rule inside the block (a dataloader error: already finished, exists, wrong state ...) rolls
back what it did and leaves a `refused` row with the error's code, written alone (nothing changed);
"not found" leaves none (`_refusal_kept`).

Who acted is read here, at the storage boundary, from the principal in force
(model/principal.py `current_principal`) and the face (model/audit.py `current_face`), so no
manager signature carries it.

An action made of several transactions by design (a workflow's cancel: the run, then each child)
opens `audited_as` around them: its row is written with its first change, in that change's
transaction, and the changes after it write none of their own.
"""

from __future__ import annotations

import contextvars
import copy
import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import asyncpg

from dataloader import metrics
from dataloader.exceptions import DataloaderError
from dataloader.model.audit import AuditEntry, AuditFilter, Outcome, current_face
from dataloader.model.ids import new_id
from dataloader.model.principal import PrincipalKind, current_principal
from dataloader.storage.executor import Executor, GroupCommit, InTransaction, Pooled
from dataloader.storage.queries import sql

log = logging.getLogger("dataloader.audit")

R = TypeVar("R")

# Errors that say nothing about the action (the database or the node could not answer): no row.
_NOT_REFUSALS = frozenset({"error", "database_unavailable", "too_many_queries"})


def _refusal_kept(code: str) -> bool:
    """A refusal worth a row: a rule said no about something that exists (it already ended, it
    exists, it is in the wrong state). "No such thing" is not kept: it names nothing the trail
    could be asked about, and any caller could fill the trail with it for free."""
    return code not in _NOT_REFUSALS and not code.endswith("_not_found")


@dataclass
class Change(Generic[R]):
    """What an audited block works with: `repo` bound to the block's transaction `tx`. The block may
    name its target once it is known (`target_id` of what it created) and add `details`."""

    repo: R
    tx: Executor
    action: str
    target_kind: str | None
    target_id: str | None
    details: dict[str, Any] = field(default_factory=dict)
    record: bool = True  # False: no row (a later part of an `audited_as` action, or the node's own duty)


@dataclass
class _Outer:
    action: str
    target_kind: str | None
    target_id: str | None
    details: dict[str, Any]
    written: bool = False


_outer: contextvars.ContextVar[_Outer | None] = contextvars.ContextVar("dl_audit_outer", default=None)


def pool_of(runner: Any) -> asyncpg.Pool | InTransaction:
    """The pool a repository (or an executor, or a pool) runs its own statements on; an
    InTransaction when it is bound to one already (a change inside a change joins it)."""
    if not isinstance(runner, asyncpg.Pool | asyncpg.Connection | asyncpg.pool.PoolConnectionProxy):
        for attr in ("pool", "on"):
            inner = getattr(runner, attr, None)
            if inner is not None:
                return pool_of(inner)
    if isinstance(runner, GroupCommit):
        return pool_of(runner.on)
    if isinstance(runner, Pooled):
        return runner.pool
    if isinstance(runner, asyncpg.Pool | InTransaction):
        return runner
    if isinstance(runner, asyncpg.Connection | asyncpg.pool.PoolConnectionProxy):  # a caller's transaction
        return InTransaction(runner)
    raise TypeError(f"no pool behind {type(runner).__name__}")


def within(repo: R, tx: InTransaction) -> R:
    """A copy of `repo` whose statements run on `tx`: repositories keep where they run in `on` (an
    executor) or `pool`, and InTransaction answers both (fetch…, and `acquire`)."""
    bound = copy.copy(repo)
    if hasattr(bound, "on"):
        bound.on = tx  # type: ignore[attr-defined]
    if hasattr(bound, "pool"):
        bound.pool = tx  # type: ignore[attr-defined]
    return bound


def _params(action: str, target_kind: str | None, target_id: str | None, details: Mapping[str, Any],
            outcome: Outcome, error_code: str | None) -> tuple[Any, ...]:
    principal = current_principal()
    face = current_face()
    return (new_id(), principal.label, principal.kind.value, principal.address, action, target_kind, target_id,
            json.dumps(details, default=str), outcome.value, error_code, face.value if face is not None else None)


async def record(on: Executor | asyncpg.Pool | asyncpg.Connection, action: str, target_kind: str | None,
                 target_id: str | None, details: Mapping[str, Any] | None = None, *,
                 outcome: Outcome = Outcome.OK, error_code: str | None = None) -> None:
    """Write one row on `on` (inside the caller's transaction, when `on` is one). The metric is the
    caller's to count once it commits (`counted`)."""
    await on.execute(sql("audit/insert"), *_params(action, target_kind, target_id, details or {}, outcome,
                                                   error_code))


def counted(action: str, outcome: Outcome) -> None:
    metrics.AUDIT_ROWS.labels(action, outcome.value).inc()


async def record_refused(runner: Any, action: str, target_kind: str | None, target_id: str | None,
                         error: DataloaderError, details: Mapping[str, Any] | None = None) -> None:
    """A refusal (nothing changed) as a row of its own; a failure to write it is logged, never
    raised over the refusal it records. For a face's own refusals too (a 403 of the access model)."""
    try:
        target = pool_of(runner)
        await record(target, action, target_kind, target_id, details, outcome=Outcome.REFUSED,
                     error_code=error.code)
    except Exception:  # the caller raises the refusal itself; this row is the lesser loss
        log.warning("could not record a refusal in the audit trail", exc_info=True,
                    extra={"action": action, "error_code": error.code})
        return
    if not isinstance(target, InTransaction):
        counted(action, Outcome.REFUSED)


async def record_after(pool: asyncpg.Pool, action: str, target_kind: str | None, target_id: str | None,
                       details: Mapping[str, Any]) -> None:
    """An action whose batches commit one by one (a key rotation): its row follows them, with what
    they did."""
    await record(pool, action, target_kind, target_id, details)
    counted(action, Outcome.OK)


async def record_prune(pool: asyncpg.Pool, details: Mapping[str, Any]) -> None:
    """A prune asked for by hand (`app.prune`, `dataloader jobs prune`): its batches commit one by
    one (a long delete must not hold its locks), so its row is written after them, with the count."""
    await record_after(pool, "jobs.prune", "jobs", None, details)


@asynccontextmanager
async def audited(repo: R, action: str, target_kind: str | None, target_id: Any = None,
                  details: Mapping[str, Any] | None = None) -> AsyncIterator[Change[R]]:
    """One transaction for the block's change and its audit row (see the module's docstring)."""
    outer = _outer.get()
    if (outer is not None and outer.written) or current_principal().kind is PrincipalKind.SYSTEM:
        # a later part of an action recorded already; or the node's own duty (an operation's runner)
        yield Change(repo, _executor(repo), action, target_kind, _str(target_id), dict(details or {}),
                     record=False)
        return
    if outer is not None:
        action, target_kind, target_id, details = outer.action, outer.target_kind, outer.target_id, outer.details
    where = pool_of(repo)
    change: Change[R]
    try:
        if isinstance(where, InTransaction):  # already inside a transaction: the row joins it
            change = Change(repo, where, action, target_kind, _str(target_id), dict(details or {}))
            yield change
            await record(where, change.action, change.target_kind, change.target_id, change.details)
            if outer is not None:
                outer.written = True
            return
        async with where.acquire() as conn, conn.transaction():
            tx = InTransaction(conn)
            change = Change(within(repo, tx), tx, action, target_kind, _str(target_id), dict(details or {}))
            yield change
            if change.record:
                await record(tx, change.action, change.target_kind, change.target_id, change.details)
        if change.record:
            counted(change.action, Outcome.OK)
            if outer is not None:
                outer.written = True
    except DataloaderError as exc:
        if _refusal_kept(exc.code) and outer is None and not isinstance(where, InTransaction):
            await record_refused(where, action, target_kind, _str(target_id), exc, details)
        raise


@asynccontextmanager
async def audited_as(repo: Any, action: str, target_kind: str | None, target_id: Any = None,
                     details: Mapping[str, Any] | None = None) -> AsyncIterator[None]:
    """An action of several transactions: its one row goes with the first `audited` change inside
    (in that change's transaction); a refusal before any change is a `refused` row."""
    outer = _Outer(action, target_kind, _str(target_id), dict(details or {}))
    token = _outer.set(outer)
    try:
        yield
    except DataloaderError as exc:
        if not outer.written and _refusal_kept(exc.code):
            _outer.reset(token)
            token = None
            await record_refused(repo, action, target_kind, outer.target_id, exc, details)
        raise
    finally:
        if token is not None:
            _outer.reset(token)


def _executor(repo: Any) -> Executor:
    where = pool_of(repo)
    return where if isinstance(where, InTransaction) else Pooled(where)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


# -- reading and pruning ---------------------------------------------------------------------------------


def _like(prefix: str | None) -> str | None:
    """A prefix as a LIKE pattern's literal part (search.sql appends the %)."""
    if prefix is None:
        return None
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def search(pool: asyncpg.Pool, f: AuditFilter, limit: int) -> list[AuditEntry]:
    """Up to `limit` rows `f` matches, newest first, after its cursor."""
    actor, actor_kind = f.actor_terms()
    action, family = f.action_terms()
    target_kind, target_id = f.target_terms()
    before_ts, before_id = f.before() or (None, None)
    rows = await pool.fetch(sql("audit/search"), actor, _like(actor_kind), action, _like(family), target_kind,
                            target_id, f.outcome.value if f.outcome else None, f.since, f.until, before_ts, before_id,
                            limit)
    return [AuditEntry.from_row(row) for row in rows]


async def prune_batch(pool: asyncpg.Pool, older_than_sec: float, batch_size: int) -> int:
    """Delete one batch of audit rows older than `older_than_sec`; how many."""
    return await pool.fetchval(sql("audit/prune_batch"), older_than_sec, batch_size)
