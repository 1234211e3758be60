"""`wf`, what a workflow function receives: steps, sleeps, waits for signals, and child runs.

A run is replayed from the start on every attempt of its job. Each `wf` call takes the next
position of the run's history (1, 2, 3…): a position already recorded returns what was recorded
without running anything; a new one runs (a step), or is recorded and the run hands its job back
(a sleep, a wait, a join not complete) by raising `Suspend`, which the runner turns into a delayed
hand-back of the job — no worker is held while a run sleeps or waits. A position recorded as
another kind or name than the code now asks for stops the run (`HistoryMismatch`): the history
and the code disagree, and guessing would re-run or skip a step.

Step results are recorded once they succeed, fenced on the run's job (a run that lost its job to
the reaper writes nothing), with a journal row in the same statement. A step's function runs only
while the attempt is known to hold the run's job and its lease: an attempt that lost it (a stalled
node) may hold a stale history, and must not run a step another attempt recorded. Known means: the
database said, at most the lease's time left (less the fence margin) ago on this machine's clock,
that the job runs with this attempt and how long its lease has left — the history's read and every
fenced record say it, so a run of steps asks the database once, not once per step; past that
window the step asks first (`step_may_start`). The clock counts a suspended machine's sleep
(CLOCK_BOOTTIME where there is one), so a machine that slept past the lease asks again. A step
cut off before its record (kill -9, a lost lease) runs again on the next attempt with the same
`wf.step_key`: steps are at least once, their recorded results exactly once.

A step given job options (a queue, lock_key, partition_key, priority or lease of its own) runs as a
*step job*: the run records the position pending with its job, inserts that job in the same
fenced transaction and suspends; the job's end counts down the position and wakes the run (0036),
as a child's end wakes a gather. The step job replays the same function with a `wf` aimed at that
position (`StepJobTarget`): every earlier position returns what was recorded and nothing runs, the
step's function runs at its position, its record is fenced on the step job's attempt, and the
replay stops there. Replaying is why a step job needs no serialized closure or arguments.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from dataloader import metrics, tracing
from dataloader.exceptions import FatalError
from dataloader.jobs.enqueue import job_request
from dataloader.model.ids import new_id
from dataloader.model.storable import encode_json
from dataloader.model.workflow import MAX_STEP_NAME, Recorded, check_name, decode, step_task_of, task_of
from dataloader.storage.db import is_connection_error
from dataloader.storage.repositories import NewJob
from dataloader.storage.workflow_repository import History, WorkflowRepository, Written
from dataloader.workers.lease_guard import fence_margin
from dataloader.workers.outcome import describe
from dataloader.workflows.derived import derived_job_id, derived_key

# The longest a run hands its job back for at once (a wait without a deadline, a join): just under
# the engine's longest delay; it then replays and hands back again, which costs one replay a year.
MAX_SUSPEND_SEC = 360 * 24 * 3600.0
# A write cut off by a database restart: the run runs again this long after (promise 10).
DATABASE_LOST_SUSPEND_SEC = 1.0
DEFAULT_STEP_ATTEMPTS = 3
SKEW_RETRY_SEC = 0.05
MAX_VALUE_BYTES = 1024 * 1024
TOKEN_BYTES = 24  # a wait token's randomness (192 bits): the token is the credential that completes it


def lease_clock() -> float:
    """Seconds on a clock that keeps counting while the machine is suspended (monotonic counts
    only while it runs: a laptop or VM that slept past the lease would still trust it)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


if not hasattr(time, "CLOCK_BOOTTIME"):  # not Linux
    lease_clock = time.monotonic


def default_step_backoff(attempt: int) -> float:
    """Seconds before a failed step's next attempt: 1, 2, 4… capped at five minutes."""
    return float(min(2 ** (attempt - 1), 300))


SuspendKind = Literal["sleep", "wait", "gather", "step_job", "retry", "taken_back", "database"]


class Suspend(BaseException):
    """Not an error, hence a BaseException: a workflow's `except Exception` cannot swallow it.
    The run hands its job back for `seconds` (a sleep, a wait, a join, a step's retry delay);
    `kind` says which, for the metrics (dl_workflow_suspends_total's reason)."""

    def __init__(self, seconds: float, reason: str, kind: SuspendKind) -> None:
        self.seconds = min(max(seconds, 0.0), MAX_SUSPEND_SEC)
        self.reason = reason
        self.kind = kind
        super().__init__(f"suspended for {self.seconds:g} s ({reason})")


class DeadlinePassed(BaseException):
    """The run passed its deadline: not an error a workflow may catch (a BaseException, like
    Suspend); the runner fails the run and cancels its unfinished children."""


class StepJobEnd(BaseException):
    """A step job's replay reached the end of what it may do (a BaseException, so a workflow's
    `except Exception` cannot swallow it): its position was run and recorded, or found recorded, or
    is no longer this job's; `Workflow.step_job_outcome` says which."""


class _RecordFenced(Exception):
    """A transactional step's record found the run's job taken back: its transaction rolls back."""


class _NotThisStepJob(StepJobEnd):
    """A step job's replay met a position it may not settle (not its own, not recorded)."""


class HistoryMismatch(Exception):
    """The code asks for another step than the run's history recorded at that position."""


class StepFailed(Exception):
    """A step failed for good (its attempts ran out, or it raised FatalError); recorded, so a
    replay raises it again at the same place."""

    def __init__(self, name: str, error: str | None) -> None:
        self.name = name
        self.error = error
        super().__init__(f"step {name!r} failed: {error}")


class ChildFailed(Exception):
    """A child run of a gather did not succeed (failed, canceled or lost)."""

    def __init__(self, run_id: str, workflow: str, status: str | None, error: str | None) -> None:
        self.run_id = run_id
        self.workflow = workflow
        self.status = status
        self.error = error
        super().__init__(f"child {workflow} {run_id} ended {status}: {error}")


@dataclass(frozen=True)
class StepJobOptions:
    """A step's job options (`wf.step(..., queue=..., lock_key=...)`), validated as an enqueue's."""

    queue: str | None = None
    lock_key: str | None = None
    partition_key: str | None = None
    priority: int | None = None
    lease_ttl_sec: int | None = None


@dataclass(frozen=True)
class StepJobTarget:
    """What a step job's replay is for: its own job and attempt, and the position it runs."""

    job_id: uuid.UUID
    attempt: int
    seq: int
    name: str


# What a step job's replay did at its position (None: it never got there).
StepJobOutcome = Literal["done", "failed", "retry", "found", "not_ours"]


@dataclass(frozen=True)
class StepCall:
    """A step to run in a `gather` (`wf.call(...)` makes one; nothing runs yet)."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    max_attempts: int
    backoff: Callable[[int], float] | None
    timeout: float | timedelta | None
    transaction: bool
    job: StepJobOptions | None = None  # run as a job of its own (None: inside the run's job)


# The running step's key: per task, so steps side by side in a gather each see their own.
_STEP_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("dataloader_step_key", default=None)


@dataclass(frozen=True)
class WaitToken:
    """A one-use secret a third party completes over HTTP (`POST /api/v1/workflows/tokens/{token}`,
    no API token needed: the token is the credential) or `app.workflows.complete_token`; the run
    takes the completion's payload with `await wf.wait_for(token)`."""

    token: str
    name: str
    signal: str  # the run's signal a completion becomes: `token:<position>`

    def __str__(self) -> str:
        return self.token


@dataclass(frozen=True)
class Child:
    """A child run to start in a `gather` (`wf.child(...)` makes one; nothing is started yet)."""

    workflow: str
    input: Any = None
    queue: str | None = None


# The longest sleep or wait (ten years): any longer is a bug, and past it no timestamp arithmetic is safe.
MAX_DURATION_SEC = 3650 * 86400.0


def _seconds(value: float | timedelta, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds != seconds or not 0 <= seconds <= MAX_DURATION_SEC:
        raise ValueError(f"{what} must be 0 to {MAX_DURATION_SEC:.0f} seconds (ten years) or a timedelta")
    return seconds


class Workflow:
    """The `wf` of an async workflow."""

    def __init__(self, *, run_id: uuid.UUID, workflow: str, input: Any, attempt: int, history: History,
                 repo: WorkflowRepository, queue_of: Callable[[str], tuple[str, int] | None], lease_ttl_sec: int,
                 log: logging.Logger | logging.LoggerAdapter[Any], clock: Callable[[], datetime] | None = None,
                 loaded_at: float | None = None, queue: str = "default", step_job: StepJobTarget | None = None,
                 step_jobs: bool = True) -> None:
        """`loaded_at`: when (on the lease clock) the read of `history` was sent. `queue`: the run's
        (a step job's default). `step_job`: this `wf` replays for that step job (see the module's
        docstring). `step_jobs=False`: steps with job options run inline (WorkflowTest)."""
        self.run_id = run_id
        self.queue = queue
        self._target = step_job
        self._step_jobs = step_jobs
        self.step_job_outcome: StepJobOutcome | None = None
        self.step_job_retry_in: float | None = None
        self.step_job_error: str | None = None
        self.workflow = workflow
        self.input = input
        self.attempt = attempt
        self.log = log
        self._history = history
        self._repo = repo
        self._queue_of = queue_of
        self._lease_ttl_sec = lease_ttl_sec
        # until when (on lease_clock) the attempt is known to hold its job: see the module's docstring
        self._lease_known_until = float("-inf")
        self._trust_lease(history.lease_left_sec, loaded_at)
        # when (on lease_clock) the run's deadline passes; None: it has none
        self.deadline: float | None = None
        if history.deadline_left_sec is not None:
            self.deadline = (loaded_at if loaded_at is not None else lease_clock()) + history.deadline_left_sec
        self._seq = 0
        # what "now" is when a recorded wake time is compared (the engine: this machine's clock; the
        # database decides what counts, this only says how long to hand back for)
        self._now = clock or (lambda: datetime.now(UTC))
        # The first mismatch seen; kept so a workflow that catches it cannot carry on regardless.
        self.broken: HistoryMismatch | None = None

    # -- what a workflow calls ------------------------------------------------------------------

    @property
    def step_key(self) -> str:
        """The running step's idempotency key for outside systems: the same on every attempt and
        every replay of that step (`<run_id>:<position>`)."""
        key = _STEP_KEY.get()
        if key is None:
            raise RuntimeError("wf.step_key is defined only while a step runs")
        return key

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, max_attempts: int = DEFAULT_STEP_ATTEMPTS,
                   backoff: Callable[[int], float] | None = None, timeout: float | timedelta | None = None,
                   transaction: bool = False, queue: str | None = None, lock_key: str | None = None,
                   partition_key: str | None = None, priority: int | None = None,
                   lease_ttl_sec: int | None = None, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` (async, or sync in a thread) once and record its result; on a
        replay return the recorded result without running it. Its JSON form is what is returned,
        the first time too, so the first run and a replay see the same value. A failure is retried
        `max_attempts` times in all, `backoff(attempt)` seconds apart, the run's job handed back
        meanwhile; then (or at once for FatalError) the step is recorded failed and StepFailed is
        raised here — on every replay too.

        `transaction=True`: `fn` is async and gets a connection to dataloader's database first,
        `fn(conn, *args, **kwargs)`, in the transaction that records the step: its writes commit
        with the record or not at all — exactly once, where a plain step is at least once.

        `queue`, `lock_key`, `partition_key`, `priority`, `lease_ttl_sec`: the step runs as a job of its
        own with these (the others as an enqueue's defaults; `queue` the run's), on that queue's
        workers, under its lock_key and flow limits; its attempts are that job's, `backoff` apart.
        The run waits for it without a worker. Checked as an enqueue's options (ValidationFailed)."""
        call = self.call(name, fn, *args, max_attempts=max_attempts, backoff=backoff, timeout=timeout,
                         transaction=transaction, queue=queue, lock_key=lock_key, partition_key=partition_key,
                         priority=priority, lease_ttl_sec=lease_ttl_sec, **kwargs)
        seq, rec = self._next("step", name)
        return await self._step_at(seq, rec, call)

    def call(self, name: str, fn: Callable[..., Any], *args: Any, max_attempts: int = DEFAULT_STEP_ATTEMPTS,
             backoff: Callable[[int], float] | None = None, timeout: float | timedelta | None = None,
             transaction: bool = False, queue: str | None = None, lock_key: str | None = None,
             partition_key: str | None = None, priority: int | None = None, lease_ttl_sec: int | None = None,
             **kwargs: Any) -> StepCall:
        """A step for `gather` (run by the gather, side by side with the others; nothing runs here).
        Takes what `step` takes."""
        self._check_step_name(name)
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if transaction and not inspect.iscoroutinefunction(fn):
            raise TypeError("a step with transaction=True takes an async function: fn(conn, *args, **kwargs)")
        job = None
        if any(v is not None for v in (queue, lock_key, partition_key, priority, lease_ttl_sec)):
            # the enqueue's own model: a queue, lock_key or priority a job may not have, a step may not
            job_request(step_task_of(self.workflow), queue=queue or self.queue, lock_key=lock_key,
                        partition_key=partition_key, priority=priority, lease_ttl_sec=lease_ttl_sec,
                        max_attempts=max_attempts)
            job = StepJobOptions(queue, lock_key, partition_key, priority, lease_ttl_sec)
        return StepCall(name, fn, args, kwargs, max_attempts, backoff, timeout, transaction, job)

    async def _step_at(self, seq: int, rec: Recorded | None, call: StepCall) -> Any:
        """Step `call` at history position `seq` (`rec`: what is recorded there). A step job's replay
        stops at its own position, whatever the step did there (StepJobEnd)."""
        target = self._target
        if target is None or seq != target.seq:
            return await self._run_step(seq, rec, call)
        try:
            await self._run_step(seq, rec, call)
        except (StepFailed, Suspend):
            if self.step_job_outcome is None:
                raise  # the step job's own job was taken back, or the database went away
        self._ended_step_job("done", None)
        raise StepJobEnd()

    async def _run_step(self, seq: int, rec: Recorded | None, call: StepCall) -> Any:
        name, fn, args, kwargs = call.name, call.fn, call.args, call.kwargs
        max_attempts, backoff, timeout, transaction = call.max_attempts, call.backoff, call.timeout, call.transaction
        target = self._target
        if target is not None and seq == target.seq:
            if rec is None or rec.job_id != target.job_id:
                self.step_job_outcome = "not_ours"  # the run was restarted from before it: another job's now
                raise StepJobEnd()
            if rec.state != "pending":
                self.step_job_outcome = "found"  # recorded by an attempt before this one
                raise StepJobEnd()
        if rec is not None and rec.state == "done":
            return rec.result
        if rec is not None and rec.state == "failed":
            raise StepFailed(name, rec.error)
        if target is not None and seq != target.seq:
            raise _NotThisStepJob()  # another position, not settled: the run's (or another step job's) to do
        if target is None and (rec.job_id if rec is not None else call.job and self._step_jobs):
            return await self._step_job_at(seq, rec, call)
        if target is None and rec is not None and rec.wake_at is not None:
            left = (rec.wake_at - self._now()).total_seconds()
            if left > 0:
                raise Suspend(left, f"step {name!r} retries later", "retry")
        # a step job's attempts are its job's (one a kill -9 cut off counts too, as the engine counts it)
        attempt = target.attempt if target is not None else (rec.attempts if rec is not None else 0) + 1
        fence_id, fence_attempt = (target.job_id, target.attempt) if target is not None else (self.run_id, self.attempt)
        if lease_clock() >= self._lease_known_until:
            asked_at = lease_clock()
            left = await self._read(self._repo.step_may_start(fence_id, fence_attempt))
            if left is None:
                # this attempt's history may be stale: another attempt may have recorded this step
                raise Suspend(0.0, "the run's job was taken back", "taken_back")
            self._trust_lease(left, asked_at)
        key = _STEP_KEY.set(f"{self.run_id}:{seq}")
        started = time.monotonic()
        try:
            with tracing.child_span(f"step {name}", {"dataloader.workflow": self.workflow,
                                                     "dataloader.workflow.step": name,
                                                     "dataloader.workflow.position": seq,
                                                     "dataloader.workflow.step_attempt": attempt}) as span:
                try:
                    if transaction:
                        committed = await self._call_recorded(seq, name, attempt, fn, args, kwargs, timeout)
                    else:
                        value = await self._call(fn, args, kwargs, timeout)
                except Exception as exc:
                    if span is not None:
                        tracing.mark_error(span, describe(exc))
                    raise
        except _RecordFenced:
            raise Suspend(0.0, "the run's job was taken back", "taken_back") from None
        except Exception as exc:
            metrics.WORKFLOW_STEP_SECONDS.labels(self.workflow).observe(time.monotonic() - started)
            if isinstance(exc, FatalError) or attempt >= max_attempts:
                metrics.WORKFLOW_STEPS.labels(self.workflow, "failed").inc()
                written = await self._write(self._record_step(seq, name, "failed", error=describe(exc),
                                                              attempts=attempt))
                self._ended_step_job("failed", self._stored(written, seq).error)
                raise StepFailed(name, self._stored(written, seq).error) from exc
            metrics.WORKFLOW_STEPS.labels(self.workflow, "retried").inc()
            delay = (backoff or default_step_backoff)(attempt)
            await self._write(self._record_step(seq, name, "pending", error=describe(exc), attempts=attempt,
                                                wake_in_sec=delay))
            self.log.warning("workflow step failed; retrying", extra={"step": name, "attempt": attempt,
                                                                      "error": describe(exc)})
            if target is not None:  # the step job's next attempt, `delay` from now (Retry)
                self.step_job_retry_in = delay
                self._ended_step_job("retry", describe(exc))
            raise Suspend(delay, f"step {name!r} retries", "retry") from exc
        finally:
            _STEP_KEY.reset(key)
        metrics.WORKFLOW_STEP_SECONDS.labels(self.workflow).observe(time.monotonic() - started)
        metrics.WORKFLOW_STEPS.labels(self.workflow, "succeeded").inc()
        if transaction:
            self._ended_step_job("done", None)
            return self._stored(committed, seq).result
        text, problem = encode_json(value, MAX_VALUE_BYTES)
        if problem is not None:
            error = f"the step's value cannot be recorded: {problem}"
            written = await self._write(self._record_step(seq, name, "failed", error=error, attempts=attempt))
            self._ended_step_job("failed", self._stored(written, seq).error)
            raise StepFailed(name, self._stored(written, seq).error)
        written = await self._write(self._record_step(seq, name, "done", result_json=text, attempts=attempt))
        self._ended_step_job("done", None)
        stored = self._stored(written, seq)
        if stored.state == "failed":
            raise StepFailed(name, stored.error)
        return stored.result

    async def sleep(self, duration: float | timedelta, name: str = "sleep") -> None:
        """Sleep durably: the end time is recorded once, and the run's job waits in the queue as a
        delayed job until then (no worker held); a replay after it passed goes straight on."""
        seconds = _seconds(duration, "a sleep")
        seq, rec = self._next("sleep", name)
        if rec is None:
            rec = self._stored(await self._write(self._repo.record(
                self.run_id, self.attempt, seq, "sleep", name, "done", wake_in_sec=seconds)), seq)
        if self._target is not None:
            return  # the run went past it: a step job's clock must not send it back to sleep
        if rec.wake_at is not None:
            left = (rec.wake_at - self._now()).total_seconds()
            if left > 0:
                raise Suspend(left, f"sleep {name!r}", "sleep")

    async def token(self, name: str) -> WaitToken:
        """Make a one-use wait token (recorded: a replay gets the same one). Hand it to a third
        party (in a step: an e-mail, a webhook), then `await wf.wait_for(token, timeout=...)`."""
        check_name("token name", name)
        seq, rec = self._next("token", name)
        if rec is None:
            secret = await self._read(self._repo.issue_token(self.run_id, self.attempt, seq, name,
                                                             secrets.token_urlsafe(TOKEN_BYTES)))
            if secret is None:
                raise Suspend(0.0, "the run's job was taken back", "taken_back")
            rec = self._stored(await self._write(self._repo.record(
                self.run_id, self.attempt, seq, "token", name, "done", result_json=json.dumps(secret))), seq)
        return WaitToken(str(rec.result), name, f"token:{seq}")

    async def wait_for(self, signal: str | WaitToken, timeout: float | timedelta | None = None) -> Any:
        """The payload of the next signal `signal` sent to this run (one sent before the wait
        counts: signals are stored), or None when `timeout` passes first. Waits without a worker.
        A WaitToken waits for its completion."""
        if isinstance(signal, WaitToken):
            signal = signal.signal
        check_name("signal name", signal)
        seconds = None if timeout is None else _seconds(timeout, "a wait's timeout")
        seq, rec = self._next("wait", signal)
        if rec is None:
            rec = self._stored(await self._write(self._repo.record(
                self.run_id, self.attempt, seq, "wait", signal, "pending", wake_in_sec=seconds)), seq)
        if rec.state == "pending":
            written = await self._write(self._repo.take_signal(self.run_id, self.attempt, seq, signal))
            if written.step is not None:
                rec = written.step
        if rec.state == "done":
            return rec.result
        left = MAX_SUSPEND_SEC if rec.wake_at is None else (rec.wake_at - self._now()).total_seconds()
        # past the deadline by this clock but not by the database's (which decides): look again
        # shortly rather than at once, so clock skew cannot make a hand-back loop
        raise Suspend(max(left, SKEW_RETRY_SEC), f"wait for {signal!r}", "wait")

    async def patched(self, change: str) -> bool:
        """The version gate: True where the run takes the code's new path, False for a run whose
        history was recorded by the code before `change`. Wrap a change to the sequence of steps:

            if await wf.patched("charge-before-reserve"):
                await wf.step("charge", charge, order)
            stock = await wf.step("reserve", reserve, order)

        A run that already recorded something at this position (old code was there) gets False and
        the gate takes no position, so its history still lines up; any other run records the
        gate's marker here and gets True, on every replay. Remove a gate once no run older than it
        is left."""
        check_name("change name", change)
        if self.broken is not None:
            raise self.broken
        seq = self._seq + 1
        rec = self._history.steps.get(seq)
        if rec is not None and not (rec.kind == "patch" and rec.name == change):
            return False  # recorded by the code before the change: the old path, no position taken
        if rec is None and self._target is not None:
            raise _NotThisStepJob()  # past what the run recorded: not a step job's to record
        self._seq = seq
        if rec is None:
            self._stored(await self._write(self._repo.record(
                self.run_id, self.attempt, seq, "patch", change, "done")), seq)
        return True

    def child(self, workflow: str, input: Any = None, *, queue: str | None = None) -> Child:
        """A child run for `gather` (started by the gather, not here)."""
        check_name("workflow name", workflow)
        return Child(workflow, input, queue)

    async def gather(self, *children: Child | StepCall, return_exceptions: bool = False,
                     fail_fast: bool = False) -> list[Any]:
        """Start the child runs and wait, without a worker, until every one has ended (succeeded,
        failed, canceled or lost: each end counts down the join in its own transaction, once).
        Returns their results in order; a child that did not succeed raises ChildFailed (the first
        one), or is returned as a ChildFailed with `return_exceptions=True`. `fail_fast`: at the
        first child that does not succeed, cancel the others (and their children) and decide now;
        a child still running then is reported as a ChildFailed with its status at that moment.

        Or steps made by `wf.call(...)`: they run side by side in this attempt, each recorded at its
        own position (in the order given); their results in order, a step failed for good raising
        StepFailed (or returned as one with `return_exceptions=True`)."""
        if children and all(isinstance(c, StepCall) for c in children):
            return await self._steps_side_by_side(children, return_exceptions)  # type: ignore[arg-type]
        for child in children:
            if not isinstance(child, Child):
                raise TypeError("gather takes children made by wf.child(...) or steps made by wf.call(...), "
                                "not both in one gather")
        name = "+".join(c.workflow for c in children)[:MAX_STEP_NAME] or "nothing"
        seq, rec = self._next("gather", name)
        if rec is None:
            rec = await self._start_children(seq, name, children, fail_fast)
        if rec.state == "pending":
            ids = [uuid.UUID(i) for i in rec.result or []]
            current = await self._read(self._repo.get_step(self.run_id, seq))
            ends = None
            if current is not None and (current.remaining or 0) > 0 and fail_fast:
                ends = await self._read(self._repo.children(ids))
                if any(e.status in ("failed", "canceled", "lost") for e in ends):
                    unfinished = [e.run_id for e in ends if e.status in ("queued", "running")]
                    await self._read(self._repo.cancel_runs(unfinished))
                    ends = await self._read(self._repo.children(ids))  # as they are after the cancel
                else:
                    ends = None
            if ends is None:
                if current is None or (current.remaining or 0) > 0:
                    raise Suspend(MAX_SUSPEND_SEC, f"gather {name!r}", "gather")
                ends = await self._read(self._repo.children(ids))
            outcome = [{"run_id": str(e.run_id), "workflow": c.workflow, "status": e.status,
                        "result": decode(e.result), "error": e.error}
                       for e, c in zip(ends, children, strict=True)]
            rec = self._stored(await self._write(self._repo.record(
                self.run_id, self.attempt, seq, "gather", name, "done", result_json=json.dumps(outcome))), seq)
        values: list[Any] = []
        for item in rec.result or []:
            if item["status"] == "succeeded":
                values.append(item["result"])
                continue
            failed = ChildFailed(item["run_id"], item["workflow"], item["status"], item["error"])
            if not return_exceptions:
                raise failed
            values.append(failed)
        return values

    # -- machinery ------------------------------------------------------------------------------

    async def _steps_side_by_side(self, calls: tuple[StepCall, ...], return_exceptions: bool) -> list[Any]:
        """Steps run concurrently, each at its own position, taken in the order given (so a replay
        lines up whichever finished first). Every step is recorded as it ends; then a step that must
        retry hands the run back (those done stay done), one that failed for good raises
        StepFailed (or is returned as one with `return_exceptions=True`)."""
        slots = [(*self._next("step", call.name, in_gather=True), call) for call in calls]
        outcomes = await asyncio.gather(*(self._step_at(seq, rec, call) for seq, rec, call in slots),
                                        return_exceptions=True)
        suspends = [o for o in outcomes if isinstance(o, Suspend)]
        if self._target is not None and self.step_job_outcome is not None:
            raise StepJobEnd()  # a step job's replay: its own slot decided, the others are not its own
        for outcome in outcomes:  # what stops the run outright comes first
            if isinstance(outcome, BaseException) and not isinstance(outcome, Suspend | StepFailed):
                raise outcome
        if suspends:
            raise min(suspends, key=lambda s: s.seconds)
        values: list[Any] = []
        for outcome in outcomes:
            if isinstance(outcome, StepFailed) and not return_exceptions:
                raise outcome
            values.append(outcome)
        return values

    async def _start_children(self, seq: int, name: str, children: tuple[Child, ...], fail_fast: bool) -> Recorded:
        if not children:
            return self._stored(await self._write(self._repo.record(
                self.run_id, self.attempt, seq, "gather", name, "done", result_json="[]")), seq)
        jobs, names = [], []
        for index, child in enumerate(children):
            found = self._queue_of(child.workflow)
            if found is None:
                raise FatalError(f"gather: no workflow {child.workflow!r} is registered on this worker")
            queue, max_attempts = child.queue or found[0], found[1]
            text, problem = encode_json({"input": child.input}, MAX_VALUE_BYTES)
            if problem is not None:
                raise FatalError(f"gather: the input of child {index} cannot be stored: {problem}")
            # the same ids and keys on every replay of this generation: a start cut off and repeated
            # starts nothing twice; a restart's replay (a new generation) starts new children
            child_id = derived_job_id(self.run_id, self._history.generation, seq, index)
            jobs.append(NewJob(queue=queue, task=task_of(child.workflow), lock_key=str(child_id),
                               args_json=text or "{}",
                               idempotency_key=derived_key(self.run_id, self._history.generation, seq, index),
                               max_attempts=max_attempts, lease_ttl_sec=self._lease_ttl_sec, job_id=child_id))
            names.append(child.workflow)
        ids = [str(j.job_id) for j in jobs]
        try:
            started = await self._repo.start(jobs, names, parent=(self.run_id, seq),
                                             gather=(self.attempt, name, len(jobs), json.dumps(ids), seq, fail_fast),
                                             traceparent=tracing.current_traceparent())
        except Exception as exc:
            if is_connection_error(exc):
                raise Suspend(DATABASE_LOST_SUSPEND_SEC, "database unavailable", "database") from exc
            raise
        if started is None:
            raise Suspend(0.0, "the run's job was taken back", "taken_back")
        return Recorded(seq, "gather", name, "pending", result=ids, remaining=len(jobs))

    def _check_step_name(self, name: str) -> None:
        if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME:
            raise ValueError(f"a step's name must be 1-{MAX_STEP_NAME} characters")

    def deadline_left(self) -> float | None:
        """Seconds until the run's deadline (negative: passed; None: no deadline)."""
        return None if self.deadline is None else self.deadline - lease_clock()

    def _next(self, kind: str, name: str, *, in_gather: bool = False) -> tuple[int, Recorded | None]:
        """The next position and what is recorded there. `in_gather`: a slot of steps side by side,
        which `_step_at` settles itself (a step job's replay must not stop at a sibling)."""
        if self.broken is not None:
            raise self.broken
        left = self.deadline_left()
        if left is not None and left <= 0:
            raise DeadlinePassed()
        self._seq += 1
        rec = self._history.steps.get(self._seq)
        if rec is not None and (rec.kind != kind or rec.name != name):
            self.broken = HistoryMismatch(
                f"the code no longer matches run {self.run_id}'s history at position {self._seq}: it recorded "
                f"{rec.kind} {rec.name!r} but the code now asks for {kind} {name!r}; the run is stopped "
                f"rather than re-running or skipping {rec.kind} {rec.name!r}")
            raise self.broken
        target = self._target
        if target is not None and not in_gather and self._seq != target.seq and (rec is None
                                                                                  or rec.state == "pending"):
            # a step job replays only what the run went past: anything not settled is not its to do
            raise _NotThisStepJob()
        return self._seq, rec

    def _record_step(self, seq: int, name: str, state: str, *, result_json: str | None = None,
                     error: str | None = None, attempts: int = 0, wake_in_sec: float | None = None,
                     conn: Any = None) -> Awaitable[Written]:
        """A step's record, fenced on the run's attempt, or on the step job's for a step job's replay."""
        target = self._target
        repo = self._repo if conn is None else self._repo.in_transaction(conn)
        if target is None:
            return repo.record(self.run_id, self.attempt, seq, "step", name, state, result_json=result_json,
                               error=error, attempts=attempts, wake_in_sec=wake_in_sec)
        return repo.record_by_step_job(target.job_id, target.attempt, self.run_id, seq, state,
                                       result_json=result_json, error=error, attempts=attempts,
                                       wake_in_sec=wake_in_sec)

    def _ended_step_job(self, outcome: StepJobOutcome, error: str | None) -> None:
        """A step job's replay decided at its position (no-op in a run's own attempt): it stops there."""
        if self._target is None or self.step_job_outcome is not None:
            return
        self.step_job_outcome = outcome
        self.step_job_error = error

    async def _step_job_at(self, seq: int, rec: Recorded | None, call: StepCall) -> Any:
        """The run's side of a step with job options: start its job (with the pending record, one
        fenced transaction), wait for its end without a worker, then take what it recorded — or,
        when it ended without a record (canceled, lost, deleted, or failed before its step ran),
        record the step failed with how its job ended."""
        name = call.name
        if rec is None:
            options = call.job or StepJobOptions()
            job_id = new_id()
            job = NewJob(queue=options.queue or self.queue, task=step_task_of(self.workflow),
                         lock_key=options.lock_key or str(job_id),
                         args_json=json.dumps({"run_id": str(self.run_id), "seq": seq, "step": name,
                                               "lease_ttl_sec": options.lease_ttl_sec or self._lease_ttl_sec}),
                         partition_key=options.partition_key or "",
                         priority=100 if options.priority is None else options.priority,
                         max_attempts=call.max_attempts, lease_ttl_sec=options.lease_ttl_sec or self._lease_ttl_sec,
                         producer="workflow", job_id=job_id)
            # the step job's attempts are spans of the run's trace, as a gather's children are
            rec = self._stored(await self._write(self._repo.start_step_job(
                self.run_id, self.attempt, seq, name, job, traceparent=tracing.current_traceparent())), seq)
            if rec.job_id == job_id:
                metrics.count_enqueue("enqueued", job.queue, job.task)
        if rec.state == "done":
            return rec.result
        if rec.state == "failed":
            raise StepFailed(name, rec.error)
        if (rec.remaining or 0) > 0:
            raise Suspend(MAX_SUSPEND_SEC, f"step {name!r} runs as job {rec.job_id}", "step_job")
        assert rec.job_id is not None
        end = (await self._read(self._repo.children([rec.job_id])))[0]
        error = f"its step job {rec.job_id} ended {end.status or 'deleted'}" + (f": {end.error}" if end.error else "")
        written = await self._write(self._repo.record(self.run_id, self.attempt, seq, "step", name, "failed",
                                                      error=error, attempts=rec.attempts))
        stored = self._stored(written, seq)
        if stored.state == "done":  # recorded after all, by a step job revived meanwhile
            return stored.result
        if written.step is not None:
            metrics.WORKFLOW_STEPS.labels(self.workflow, "failed").inc()
        raise StepFailed(name, stored.error)

    def check_history_consumed(self) -> None:
        """At the run's end: a history with positions past the last one the code asked for means
        the code skipped recorded steps."""
        extra = [s for seq, s in sorted(self._history.steps.items()) if seq > self._seq]
        if extra and self.broken is None:
            first = extra[0]
            self.broken = HistoryMismatch(
                f"the code no longer matches run {self.run_id}'s history: it ended after position {self._seq} "
                f"but the history records {first.kind} {first.name!r} at position {first.seq}")
        if self.broken is not None:
            raise self.broken

    def _stored(self, written: Written, seq: int) -> Recorded:
        if written.step is None:  # cannot happen: a live write either stores or finds the row
            raise RuntimeError(f"run {self.run_id}: position {seq} was not recorded")
        return written.step

    async def _write(self, write: Awaitable[Written]) -> Written:
        sent_at = lease_clock()
        written = await self._read(write)
        if not written.live:
            # the reaper took the run's job back: this attempt must not go on (promise 3)
            raise Suspend(0.0, "the run's job was taken back", "taken_back")
        self._trust_lease(written.lease_left_sec, sent_at)
        return written

    def _trust_lease(self, left_sec: float | None, sent_at: float | None) -> None:
        """The database said the lease had `left_sec` at a moment after `sent_at`: it cannot run out
        before sent_at + left_sec on this clock; the fence margin covers a failover's clock skew."""
        if left_sec is None or sent_at is None:
            return
        until = sent_at + left_sec - fence_margin(self._lease_ttl_sec)
        self._lease_known_until = max(self._lease_known_until, until)

    async def _read(self, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except Exception as exc:
            if is_connection_error(exc):
                raise Suspend(DATABASE_LOST_SUSPEND_SEC, "database unavailable", "database") from exc
            raise

    async def _call_recorded(self, seq: int, name: str, attempt: int, fn: Callable[..., Any], args: tuple[Any, ...],
                             kwargs: dict[str, Any], timeout: float | timedelta | None) -> Written:
        """Run a `transaction=True` step and record it done in one transaction: `fn`'s writes and the
        record commit together. Fenced: an attempt that lost the run's job rolls both back."""
        sent_at = lease_clock()
        async with self._repo.transaction() as conn:
            call = fn(conn, *args, **kwargs)
            value = await (asyncio.wait_for(call, _seconds(timeout, "a step's timeout")) if timeout is not None
                           else call)
            text, problem = encode_json(value, MAX_VALUE_BYTES)
            if problem is not None:  # recorded failed, like a plain step's; its writes roll back
                raise FatalError(f"the step's value cannot be recorded: {problem}")
            written = await self._read(self._record_step(seq, name, "done", result_json=text, attempts=attempt,
                                                         conn=conn))
            if not written.live:
                raise _RecordFenced()
        self._trust_lease(written.lease_left_sec, sent_at)
        return written

    async def _call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                    timeout: float | timedelta | None) -> Any:
        if inspect.iscoroutinefunction(fn):
            call: Awaitable[Any] = fn(*args, **kwargs)
        else:
            call = asyncio.to_thread(fn, *args, **kwargs)
        if timeout is not None:
            value = await asyncio.wait_for(call, _seconds(timeout, "a step's timeout"))
        else:
            value = await call
        if inspect.isawaitable(value):  # a plain function that returned a coroutine
            value = await value
        return value


class SyncWorkflow:
    """The `wf` of a plain (sync) workflow, which runs in a worker thread: each call runs the
    async one on the engine's loop and blocks for it."""

    def __init__(self, inner: Workflow, loop: asyncio.AbstractEventLoop) -> None:
        self._inner = inner
        self._loop = loop
        self.run_id = inner.run_id
        self.workflow = inner.workflow
        self.input = inner.input
        self.log = inner.log

    def _run(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[arg-type]

    @property
    def step_key(self) -> str:
        return self._inner.step_key

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._run(self._inner.step(name, fn, *args, **kwargs))

    def sleep(self, duration: float | timedelta, name: str = "sleep") -> None:
        self._run(self._inner.sleep(duration, name))

    def token(self, name: str) -> WaitToken:
        return self._run(self._inner.token(name))

    def wait_for(self, signal: str | WaitToken, timeout: float | timedelta | None = None) -> Any:
        return self._run(self._inner.wait_for(signal, timeout))

    def patched(self, change: str) -> bool:
        return self._run(self._inner.patched(change))

    def child(self, workflow: str, input: Any = None, *, queue: str | None = None) -> Child:
        return self._inner.child(workflow, input, queue=queue)

    def call(self, name: str, fn: Callable[..., Any], *args: Any, **options: Any) -> StepCall:
        return self._inner.call(name, fn, *args, **options)

    def gather(self, *children: Child | StepCall, return_exceptions: bool = False, fail_fast: bool = False
               ) -> list[Any]:
        return self._run(self._inner.gather(*children, return_exceptions=return_exceptions, fail_fast=fail_fast))
