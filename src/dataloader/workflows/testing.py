"""Run a workflow in a test, in memory, with the test's own clock and signals: no database, no
worker. The workflow's code runs exactly as the engine runs it (`wf` is the engine's own, replayed
from a history after every hand-back), but the history lives in memory and time only moves when
the test says so:

    from dataloader.workflows.testing import WorkflowTest

    async def test_an_order_is_packed_after_payment():
        run = await WorkflowTest.start("orders.fulfil", {"order": 7})
        assert run.status == "waiting"               # sleeping two hours
        await run.advance(hours=2)                   # ...which pass at once
        await run.signal("payment", {"paid": True})  # wakes the wait
        assert run.status == "succeeded" and run.result == {"packed": 3}
        assert run.step_runs["reserve"] == 1          # replays never ran it again

A gather's children run in the same memory with the same clock. A step with job options (`queue=`,
`lock_key=`…) is checked as the engine checks it and runs inline, as a step without them does (its
queue's workers, lock and limits are the engine's: tests/workflows/test_step_jobs.py). A step's
retry backoff is time too: `advance` past it and the step runs again. What the engine does to a run that the code cannot
cause (a kill -9, a lost lease, a database restart) is not simulated here; tests/workflows has those
against a real PostgreSQL and real processes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from dataloader.exceptions import FatalError, TokenNotFound, TokenUsed, UnknownWorkflow, WorkflowFinished
from dataloader.model.storable import encode_json
from dataloader.model.workflow import Recorded
from dataloader.storage.workflow_repository import ChildEnd, History, Written
from dataloader.workers.outcome import describe
from dataloader.workflows.context import MAX_VALUE_BYTES, Suspend, SyncWorkflow, WaitToken, Workflow
from dataloader.workflows.registry import WorkflowDefinition, WorkflowRegistry
from dataloader.workflows.registry import workflows as registered

log = logging.getLogger("dataloader.workflows.testing")

# A run that keeps handing back at once (a step retried with no backoff, over and over) is a bug
# in the workflow, not a test that should hang: this many replays in one drive stop it.
MAX_REPLAYS_PER_DRIVE = 1000
ENDED = ("succeeded", "failed", "canceled")


@dataclass
class _Memory:
    """What the database holds for runs, for every run of one test (a parent and its children)."""

    now: datetime
    registry: WorkflowRegistry
    runs: dict[uuid.UUID, WorkflowTest] = field(default_factory=dict)
    step_runs: Counter[str] = field(default_factory=Counter)
    tokens: dict[str, tuple[WorkflowTest, str]] = field(default_factory=dict)  # token -> (its run, its signal)
    used_tokens: set[str] = field(default_factory=set)


class _MemoryRepository:
    """The calls `wf` makes of WorkflowRepository, on memory, with the same rules: the first record
    of a position wins, a pending one is completed only by the same kind and name, a signal answers
    one wait, a wait past its deadline ends as a timeout."""

    def __init__(self, memory: _Memory, run: WorkflowTest) -> None:
        self.memory = memory
        self.run = run

    def _wake_at(self, seconds: float | None) -> datetime | None:
        return None if seconds is None else self.memory.now + timedelta(seconds=seconds)

    async def record(self, run_id: uuid.UUID, attempt: int, seq: int, kind: str, name: str, state: str, *,
                     result_json: str | None = None, error: str | None = None, attempts: int = 0,
                     wake_in_sec: float | None = None, remaining: int | None = None) -> Written:
        steps = self.run.steps
        found = steps.get(seq)
        if found is not None and (found.state != "pending" or found.kind != kind or found.name != name):
            return Written(True, None)
        steps[seq] = Recorded(seq=seq, kind=kind, name=name, state=state,  # type: ignore[arg-type]
                              result=None if result_json is None else json.loads(result_json), error=error,
                              attempts=attempts, wake_at=self._wake_at(wake_in_sec),
                              remaining=remaining if found is None else found.remaining,
                              created_at=self.memory.now if found is None else found.created_at,
                              finished_at=None if state == "pending" else self.memory.now)
        return Written(True, steps[seq])

    async def take_signal(self, run_id: uuid.UUID, attempt: int, seq: int, name: str) -> Written:
        found = self.run.steps.get(seq)
        if found is None or found.kind != "wait" or found.state != "pending":
            return Written(True, None)
        waiting = self.run.signals.get(name)
        if waiting:
            payload = waiting.pop(0)
            ended = replace(found, state="done", result=payload, error=None, finished_at=self.memory.now)
        elif found.wake_at is not None and found.wake_at <= self.memory.now:
            ended = replace(found, state="done", result=None, error="timeout", finished_at=self.memory.now)
        else:
            return Written(True, None)
        self.run.steps[seq] = ended
        return Written(True, ended)

    async def get_step(self, run_id: uuid.UUID, seq: int) -> Recorded | None:
        return self.run.steps.get(seq)

    async def issue_token(self, run_id: uuid.UUID, attempt: int, seq: int, name: str, fresh: str) -> str | None:
        for token, (run, signal) in self.memory.tokens.items():
            if run is self.run and signal == f"token:{seq}":
                return token
        self.memory.tokens[fresh] = (self.run, f"token:{seq}")
        return fresh

    def transaction(self) -> Any:
        raise FatalError("WorkflowTest runs no step with transaction=True: it has no database to give it "
                         "(test such a step against a real one, with the engine)")

    async def step_may_start(self, run_id: uuid.UUID, attempt: int) -> float | None:
        return 3600.0  # one attempt at a time, in this process: nothing can take the run away

    async def start(self, jobs: list[Any], names: list[str], *, parent: tuple[uuid.UUID, int] | None = None,
                    gather: tuple[int, str, int, str, int, bool] | None = None,
                    traceparent: str | None = None) -> list[uuid.UUID]:
        if gather is not None:
            attempt, gather_name, count, ids_json, seq, _fail_fast = gather
            await self.record(self.run.run_id, attempt, seq, "gather", gather_name, "pending",
                              result_json=ids_json, remaining=count)
        started = []
        for job, workflow_name in zip(jobs, names, strict=True):
            if job.job_id in self.memory.runs:  # a replayed start starts nothing twice
                continue
            child = WorkflowTest(self.memory, workflow_name, json.loads(job.args_json).get("input"), job.job_id,
                                 parent=(self.run, parent[1] if parent else 0))
            self.memory.runs[job.job_id] = child
            started.append(job.job_id)
        for run_id in started:  # children run as soon as they exist, as free workers would take them
            await self.memory.runs[run_id].drive()
        return started

    async def children(self, run_ids: list[uuid.UUID]) -> list[ChildEnd]:
        ends = []
        for run_id in run_ids:
            child = self.memory.runs.get(run_id)
            if child is None:
                ends.append(ChildEnd(run_id, None, None, None))
                continue
            status = child.status if child.status in ENDED else ("queued" if child.status == "waiting" else "running")
            result = None if child.status != "succeeded" else json.dumps(child.result)
            ends.append(ChildEnd(run_id, status, result, child.error))
        return ends

    async def cancel_runs(self, run_ids: list[uuid.UUID]) -> None:
        for run_id in run_ids:
            child = self.memory.runs.get(run_id)
            if child is not None:
                child._end("canceled", None, "canceled")


class WorkflowTest:
    """One run in memory. `status`: `waiting` (handed back: a sleep, a wait, a join, a backoff),
    `succeeded`, `failed` or `canceled`; `result` and `error` as `app.workflows` would report them;
    `steps` the recorded history by position; `step_runs` how many times each step's function
    really ran, over every run of the test (a replay runs nothing)."""

    def __init__(self, memory: _Memory, workflow: str, input: Any, run_id: uuid.UUID,
                 parent: tuple[WorkflowTest, int] | None = None) -> None:
        definition = memory.registry.get(workflow)
        if definition is None:
            raise UnknownWorkflow(f"no workflow {workflow!r} is registered here "
                                  f"(registered: {', '.join(memory.registry.names()) or 'none'})")
        self.definition: WorkflowDefinition = definition
        self.memory = memory
        self.workflow = workflow
        self.input = input
        self.run_id = run_id
        self.parent = parent
        self.status = "waiting"
        self.result: Any = None
        self.error: str | None = None
        self.steps: dict[int, Recorded] = {}
        self.signals: dict[str, list[Any]] = {}
        self.attempts = 0
        self.due_at: datetime | None = memory.now
        self._joined = False

    # -- what a test calls ----------------------------------------------------------------------

    @classmethod
    async def start(cls, workflow: str, input: Any = None, *, now: datetime | None = None,
                    registry: WorkflowRegistry | None = None) -> WorkflowTest:
        """Start a run of registered `workflow` and run it until it first hands back or ends.
        `now`: the test clock's start (default: the real time now)."""
        text, problem = encode_json({"input": input}, MAX_VALUE_BYTES)
        if problem is not None:
            raise ValueError(f"the workflow's input cannot be stored: {problem}")
        memory = _Memory(now or datetime.now(UTC), registry or registered)
        run = cls(memory, workflow, json.loads(text or "{}").get("input"), uuid.uuid4())
        memory.runs[run.run_id] = run
        await run.drive()
        return run

    @property
    def now(self) -> datetime:
        return self.memory.now

    @property
    def step_runs(self) -> Counter[str]:
        return self.memory.step_runs

    @property
    def children(self) -> list[WorkflowTest]:
        return [r for r in self.memory.runs.values() if r.parent is not None and r.parent[0] is self]

    async def advance(self, duration: float | timedelta | None = None, **units: float) -> WorkflowTest:
        """Move the test clock on (`advance(3600)`, `advance(timedelta(hours=1))`, `advance(hours=1)`)
        and run every run that is due by then, this one and its children, as the engine would."""
        seconds = (duration.total_seconds() if isinstance(duration, timedelta) else float(duration or 0)) \
            + timedelta(**units).total_seconds()
        if seconds < 0:
            raise ValueError("time only moves forward")
        self.memory.now += timedelta(seconds=seconds)
        await self._drive_due()
        return self

    async def signal(self, name: str, payload: Any = None) -> WorkflowTest:
        """Send signal `name` to this run (stored until a wait takes it) and run it."""
        if self.status in ENDED:
            raise WorkflowFinished(f"workflow run {self.run_id} has ended ({self.status}); the signal was not stored",
                                   self.status)
        text, problem = encode_json(payload, MAX_VALUE_BYTES)
        if problem is not None:
            raise ValueError(f"the signal's payload cannot be stored: {problem}")
        self.signals.setdefault(name, []).append(None if text is None else json.loads(text))
        self.due_at = self.memory.now
        await self._drive_due()
        return self

    async def complete_token(self, token: str | WaitToken, payload: Any = None) -> WorkflowTest:
        """Complete one of this run's wait tokens, as a third party would over HTTP, and run it.
        Once: a second completion raises TokenUsed."""
        value = str(token)
        found = self.memory.tokens.get(value)
        if found is None or found[0] is not self:
            raise TokenNotFound("no such wait token")
        if value in self.memory.used_tokens:
            raise TokenUsed("the wait token was completed already; a token answers once")
        await self.signal(found[1], payload)
        self.memory.used_tokens.add(value)
        return self

    async def cancel(self) -> WorkflowTest:
        """Cancel this run and every run below it that has not ended."""
        for child in self.children:
            if child.status not in ENDED:
                await child.cancel()
        self._end("canceled", None, "canceled")
        return self

    # -- machinery ------------------------------------------------------------------------------

    async def _drive_due(self) -> None:
        for _ in range(MAX_REPLAYS_PER_DRIVE):
            due = [r for r in self.memory.runs.values()
                   if r.status == "waiting" and r.due_at is not None and r.due_at <= self.memory.now]
            if not due:
                return
            for run in due:
                await run.drive()
        raise RuntimeError("the runs kept handing back at once: a step retried with no backoff?")

    async def drive(self) -> None:
        """Replay the run until it hands back for later, or ends."""
        for _ in range(MAX_REPLAYS_PER_DRIVE):
            if self.status in ENDED:
                return
            again = await self._replay()
            if not again:
                return
        raise RuntimeError(f"workflow run {self.run_id} kept handing back at once: a step retried with no backoff?")

    async def _replay(self) -> bool:
        """One attempt; True when the run is due again at once."""
        self.attempts += 1
        repo = _MemoryRepository(self.memory, self)
        memory = self.memory

        def queue_of(name: str) -> tuple[str, int] | None:
            found = memory.registry.get(name)
            return None if found is None else (found.queue, found.max_attempts)

        wf = Workflow(run_id=self.run_id, workflow=self.workflow, input=self.input, attempt=self.attempts,
                      history=History(0, dict(self.steps)), repo=repo,  # type: ignore[arg-type]
                      queue_of=queue_of, lease_ttl_sec=60, log=log, clock=lambda: memory.now,
                      queue=self.definition.queue, step_jobs=False)
        counting = _CountingSteps(wf, memory.step_runs)
        try:
            if self.definition.is_async:
                value = await self.definition.func(counting, wf.input)
            else:
                loop = asyncio.get_running_loop()
                value = await asyncio.to_thread(self.definition.func, SyncWorkflow(counting, loop),  # type: ignore[arg-type]
                                                wf.input)
            wf.check_history_consumed()
        except Suspend as suspended:
            if wf.broken is not None:
                self._end("failed", None, str(wf.broken))
                return False
            self.due_at = memory.now + timedelta(seconds=suspended.seconds)
            return suspended.seconds <= 0 or self._joined_now()
        except FatalError as exc:
            self._end("failed", None, str(exc))
            return False
        except Exception as exc:
            self._end("failed", None, str(wf.broken) if wf.broken is not None else describe(exc))
            return False
        text, problem = encode_json(value, MAX_VALUE_BYTES)
        if problem is not None:
            self._end("failed", None, f"the workflow's result cannot be stored: {problem}")
        else:
            self._end("succeeded", None if text is None else json.loads(text), None)
        return False

    def _joined_now(self) -> bool:
        """A gather whose children all ended while it was starting them is due at once (the last
        child's end woke it)."""
        pending = [s for s in self.steps.values() if s.kind == "gather" and s.state == "pending"]
        return any((s.remaining or 0) <= 0 for s in pending)

    def _end(self, status: str, result: Any, error: str | None) -> None:
        if self.status in ENDED:
            return
        self.status, self.result, self.error, self.due_at = status, result, error, None
        if self.parent is not None and not self._joined:
            # the join's count, once per child, whatever way it ended (as 0030's trigger counts it)
            self._joined = True
            parent, seq = self.parent
            gather = parent.steps.get(seq)
            if gather is not None and gather.state == "pending":
                remaining = (gather.remaining or 0) - 1
                parent.steps[seq] = replace(gather, remaining=remaining)
                fail_fast_hit = status != "succeeded"
                if remaining <= 0 or fail_fast_hit:
                    parent.due_at = self.memory.now


class _CountingSteps:
    """`wf` as the workflow sees it, counting each step function that really runs."""

    def __init__(self, inner: Workflow, counts: Counter[str]) -> None:
        self._inner = inner
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def step(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        counts = self._counts

        if asyncio.iscoroutinefunction(fn):
            async def counted(*a: Any, **k: Any) -> Any:
                counts[name] += 1
                return await fn(*a, **k)
        else:
            def counted(*a: Any, **k: Any) -> Any:  # type: ignore[misc]
                counts[name] += 1
                return fn(*a, **k)
        return await self._inner.step(name, counted, *args, **kwargs)
