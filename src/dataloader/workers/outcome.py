"""What the end of an attempt means, decided without touching the database.

An attempt ends with a returned value, an exception, or an interruption, perhaps while a stop
(cancel, shutdown, lost lease) was requested. Turning that into "write succeeded / canceled /
retry / failed / hand back" is a set of rules (lease_lost first, a cancel wins over a retry, a
pipeline that saw the stop and returned ends as the stop says, retry delays clamped, results
encoded and checked) that used to be mixed with the I/O of `Attempt`. Here they are one pure
function, `decide`, so a table-driven unit test covers every combination without a database, and
`Attempt` (the engine) and `dataloader.testing.run_inline` (the fake engine) perform the same
`Decision`. (oban-py's executor has the same split.)

The finish statement (`finish_jobs.sql`) stays the authority for what the row becomes: it alone
sees a cancel requested a moment ago or a fenced-off attempt. `Decision.kind` is what the attempt
expects; `Decision.outcome` is what it asks the statement to write.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from dataloader.exceptions import Cancel, FatalError, JobOutcome, JobStopped, Retry, Snooze
from dataloader.model.chain import Stage, Then
from dataloader.model.storable import encode_json
from dataloader.storage.queue_connection import FinishOutcome
from dataloader.workers.pipelines.context import StopReason
from dataloader.workers.pipelines.registry import Pipeline, default_backoff

DecisionKind = Literal["succeeded", "canceled", "retry", "failed", "release", "snooze", "committed"]

# The longest retry delay a backoff function may ask for (one year).
MAX_RETRY_DELAY_SEC = 365 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Decision:
    """How an attempt ends.

    `kind`: what the attempt expects the job to become — `succeeded`, `canceled`, `retry` (back to
    `queued`, the attempt counted), `failed`, `release` (back to `queued`, the attempt not counted:
    a shutdown or a lost lease), `snooze` (a release asked for by the pipeline), or `committed`
    (the pipeline's `ctx.transaction()` already finished the job: only its lock is released).
    `outcome`: the finish statement's outcome. `delay_sec`: before the job may run again. `error`:
    the job's error text. `fatal`: no retry. `reason`: the `requeue` journal row's reason of a
    release, or of an error ended by its run-time limit (`timeout`, on the requeue or failed
    row). `result_json`: the result to store (JSON text; None stores NULL). `next_json`: the jobs
    a success enqueues (`workers/chaining.py`; None: none), `next_stages`: the stages the pipeline
    returned in a `Then`, `join_stage` its join. `exc`: the exception behind an error, for the log.
    """

    kind: DecisionKind
    outcome: FinishOutcome
    delay_sec: float = 0.0
    error: str | None = None
    fatal: bool = False
    reason: str | None = None
    result_json: str | None = None
    next_json: str | None = None
    next_stages: tuple[Stage, ...] = ()
    join_stage: Stage | None = None
    exc: BaseException | None = field(default=None, compare=False)

    @property
    def journal(self) -> str:
        """The journal row this decision should write (`finish_jobs.sql` writes it)."""
        if self.kind in ("succeeded", "committed"):
            return "done"
        if self.kind in ("canceled", "failed"):
            return self.kind
        return "requeue"


def decide(
    *,
    stop_reason: StopReason | None,
    stop_seen: bool,
    interrupted: bool = False,
    returned: Any = None,
    raised: BaseException | None = None,
    attempts_left: int,
    backoff: Callable[[], float],
    committed: bool = False,
    max_result_bytes: int = 256 * 1024,
    timeout_sec: float | None = None,
    plan_next: Callable[[Then | None, Any], str | None] | None = None,
) -> Decision:
    """Decide how an attempt ends.

    `stop_reason`: the stop requested while it ran (None: none). `stop_seen`: the pipeline read
    the stop (`ctx.stop_requested` true, or `raise_if_stopped()` after it was set). `interrupted`:
    the engine cancelled its task (a plain coroutine at a cancel or lost lease, or the shutdown
    deadline). `returned` / `raised`: what the pipeline returned or raised. `attempts_left`:
    attempts the budget allows after this one (`max_attempts - (attempt - attempts_before_retry)`).
    `backoff()`: the pipeline's retry delay, called only when an error retries (see `retry_delay`).
    `committed`: its `ctx.transaction()` committed, so the job is already `succeeded`.
    `max_result_bytes`: the largest result stored (DL_MAX_ARGS_BYTES). `timeout_sec`: the run-time
    limit behind a `timeout` stop (for the error text). `plan_next(then, result)`: the next jobs
    of a success (chains), as `workers.chaining.plan_next_jobs` builds them; a ValueError from it
    fails the attempt like an unstorable result. A returned `Then` succeeds with its `result`.

    A `timeout` stop (the attempt ran past its limit) ends like an error with reason `timeout`
    (retried or failed per the budget, the backoff asked), unless the pipeline returned without
    seeing the stop (it finished its work) or returned/raised an outcome of its own; a
    FatalError stays fatal. A cancel or a lost lease requested as well wins (stop priority).
    """
    if committed:
        # The job finished with the pipeline's own writes; whatever happened after the block
        # (a stop, an exception) cannot undo that commit. Only the lock is left to release.
        return Decision("committed", "committed", exc=raised)
    if stop_reason == "lease_lost":
        # The reaper may already have handed the job to someone else: nothing of this attempt
        # counts. The write is refused if so (fenced) and only frees the lock.
        return Decision("release", "release", reason="lease_lost")

    exc: BaseException | None = JobStopped(stop_reason) if interrupted else raised
    if exc is None and isinstance(returned, JobOutcome):
        exc = returned  # a returned outcome means what raising it means
    if exc is None and stop_reason is not None and stop_seen:
        # It returned after it saw the stop (polled ctx.stop_requested and returned): it may have
        # stopped early, so the stop decides, as if it had raised JobStopped. One that never
        # looked finished its work.
        exc = JobStopped(stop_reason)

    if exc is None:
        then = returned if isinstance(returned, Then) else None
        value = then.result if then is not None else returned
        result_json, problem = encode_json(value, max_result_bytes)
        if problem is None:
            try:
                next_json = plan_next(then, value) if plan_next is not None else None
            except ValueError as stage_problem:
                exc = ValueError(f"the job's next stages cannot be enqueued: {stage_problem}")
            else:
                return Decision("succeeded", "succeeded", result_json=result_json, next_json=next_json,
                                next_stages=then.stages if then is not None else (),
                                join_stage=then.join if then is not None else None)
        else:
            # An error like any other (a pending cancel still wins), not a crash of the finish batch.
            exc = ValueError(f"the pipeline's return value cannot be stored as the job's result: {problem}")

    if isinstance(exc, JobOutcome):
        if isinstance(exc, Cancel):
            return Decision("canceled", "canceled", error=exc.reason[:4000], exc=exc)
        if stop_reason == "cancel":
            # A cancel was requested: it wins over a snooze or a retry.
            return Decision("canceled", "canceled", error="canceled by request")
        if isinstance(exc, Snooze):
            return Decision("snooze", "release", delay_sec=exc.seconds, reason="snooze", exc=exc)
        if isinstance(exc, Retry):
            delay = exc.after if exc.after is not None else backoff()
            kind: DecisionKind = "retry" if attempts_left > 0 else "failed"
            return Decision(kind, "error", delay_sec=delay, error=describe(exc), exc=exc)

    if stop_reason == "timeout" and not isinstance(exc, FatalError):
        return _timeout(exc, timeout_sec, attempts_left, backoff)

    if isinstance(exc, JobStopped | asyncio.CancelledError) and stop_reason is not None:
        if stop_reason == "cancel":
            return Decision("canceled", "canceled", error="canceled by request")
        return Decision("release", "release", reason="shutdown")

    if stop_reason == "cancel" and not isinstance(exc, FatalError):
        # It failed while a cancel was pending: the finish statement cancels instead of retrying
        # (it reads cancel_requested), keeping the error text.
        return Decision("canceled", "error", delay_sec=0.0, error=describe(exc), exc=exc)
    return _error(exc, attempts_left, backoff)


def timeout_text(timeout_sec: float | None) -> str:
    """The job's error text for an attempt stopped at its run-time limit."""
    return "run time limit exceeded" if timeout_sec is None else f"run time limit of {timeout_sec:g} s exceeded"


def _timeout(exc: BaseException, timeout_sec: float | None, attempts_left: int,
             backoff: Callable[[], float]) -> Decision:
    error = timeout_text(timeout_sec)
    if not isinstance(exc, JobStopped | asyncio.CancelledError):
        error = f"{error}; then {describe(exc)}"[:4000]  # what it raised as it was stopped
    if attempts_left <= 0:
        return Decision("failed", "error", error=error, reason="timeout", exc=exc)
    return Decision("retry", "error", delay_sec=backoff(), error=error, reason="timeout", exc=exc)


def _error(exc: BaseException, attempts_left: int, backoff: Callable[[], float]) -> Decision:
    if isinstance(exc, FatalError):
        return Decision("failed", "error", error=describe(exc), fatal=True, exc=exc)
    if attempts_left <= 0:
        # No retry will happen: the backoff is not asked (a broken one would only add noise).
        return Decision("failed", "error", error=describe(exc), exc=exc)
    return Decision("retry", "error", delay_sec=backoff(), error=describe(exc), exc=exc)


def retry_delay(pipeline: Pipeline, attempt: int, logger: logging.Logger | None = None) -> float:
    """Seconds before the next attempt: the pipeline's backoff, made safe to store. A backoff that
    raises or returns something that is not a finite number falls back to the default; the result
    is clamped to [0, MAX_RETRY_DELAY_SEC] so no value can overflow the database's interval."""
    logger = logger or logging.getLogger("dataloader.worker")
    try:
        delay = float(pipeline.backoff(attempt))
    except Exception as exc:
        logger.error("backoff function failed; using the default", extra={"error": describe(exc)})
        delay = default_backoff(attempt)
    if math.isnan(delay):
        logger.error("backoff function returned NaN; using the default")
        delay = default_backoff(attempt)
    return min(max(delay, 0.0), MAX_RETRY_DELAY_SEC)


def describe(exc: BaseException) -> str:
    """`Type: message`, at most 4000 characters (the job's error text)."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:4000]
