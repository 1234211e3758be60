"""Workflows as data: a run, one recorded position of its history, and the rules of what may be
named and stored — defined once here, so Python, HTTP and the CLI validate alike (docs/workflows.md)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from dataloader.model import payload_crypto
from dataloader.model.clock import iso

StepKind = Literal["step", "sleep", "wait", "gather", "patch"]
StepState = Literal["pending", "done", "failed"]

# A workflow's name and a signal's name: what a task name may carry after `workflow:`.
NAME_PATTERN = r"[A-Za-z0-9_.:-]{1,100}"
_NAME = re.compile(NAME_PATTERN)
TASK_PREFIX = "workflow:"
# The task of a workflow's step jobs: a step with a queue, lock_key or other job options of its own
# runs as a job of its own, on any worker whose process registered the workflow.
STEP_TASK_PREFIX = "workflow-step:"
# A step's name is for people and for the history check: any text, bounded.
MAX_STEP_NAME = 200


def check_name(what: str, value: Any) -> str:
    """A workflow or signal name, or ValueError saying what is wrong."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(f"{what} must be 1-100 letters, digits, '_', '.', ':' or '-' (got {value!r})")
    return value


def task_of(workflow: str) -> str:
    """The task name of a workflow's run jobs."""
    return TASK_PREFIX + workflow


def step_task_of(workflow: str) -> str:
    """The task name of a workflow's step jobs."""
    return STEP_TASK_PREFIX + workflow


def iso_utc(value: datetime | None) -> str | None:
    return None if value is None else iso(value)


def decode(text: str | None) -> Any:
    """A result, payload or input read as JSON text, its envelope opened (model/payload_crypto.py)."""
    return payload_crypto.reveal_text(text)


def run_input(row: Any) -> Any:
    """A run's input: get_run.sql answers the whole args when they are sealed (SQL cannot look
    inside an envelope), and their `input` otherwise."""
    if not row["input_sealed"]:
        return decode(row["input"])
    args = decode(row["input"])
    return args.get("input") if type(args) is dict else args


@dataclass(frozen=True, slots=True)
class Recorded:
    """One position of a run's history (`dl_workflow_steps`)."""

    seq: int
    kind: StepKind
    name: str
    state: StepState
    result: Any = None
    error: str | None = None
    attempts: int = 0
    wake_at: datetime | None = None
    remaining: int | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    # a step that ran as a job of its own: that job's id, and (in a run's read) its queue, lock_key
    # and status (None: the step ran inside its run's job, or its job was deleted since)
    job_id: uuid.UUID | None = None
    job_queue: str | None = None
    job_lock_key: str | None = None
    job_status: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> Recorded:
        keys = set(row.keys())  # an asyncpg Record's keys() is an iterator: one `in` would use it up

        def optional(name: str) -> Any:
            return row[name] if name in keys else None

        return cls(seq=row["seq"], kind=row["kind"], name=row["name"], state=row["state"],
                   result=decode(row["result"]), error=row["error"], attempts=row["attempts"],
                   wake_at=row["wake_at"], remaining=row["remaining"],
                   created_at=optional("created_at"), finished_at=optional("finished_at"),
                   job_id=optional("job_id"), job_queue=optional("job_queue"),
                   job_lock_key=optional("job_lock_key"), job_status=optional("job_status"))

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "kind": self.kind, "name": self.name, "state": self.state,
                "result": self.result, "error": self.error, "attempts": self.attempts,
                "wake_at": iso_utc(self.wake_at), "remaining": self.remaining,
                "created_at": iso_utc(self.created_at), "finished_at": iso_utc(self.finished_at),
                "job_id": None if self.job_id is None else str(self.job_id), "job_queue": self.job_queue,
                "job_lock_key": self.job_lock_key, "job_status": self.job_status}


@dataclass(frozen=True, slots=True)
class EarlierChild:
    """A child a run started in a generation a restart left: canceled by that restart if it had not
    ended, and counted by no join since; kept for the run's history."""

    run_id: uuid.UUID
    workflow: str
    seq: int  # the gather's position in that generation's history
    generation: int
    status: str | None  # its job's; None: its job is gone (pruned)

    @classmethod
    def from_row(cls, row: Any) -> EarlierChild:
        return cls(run_id=row["run_id"], workflow=row["workflow"], seq=row["parent_seq"],
                   generation=row["parent_generation"], status=row["status"])

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": str(self.run_id), "workflow": self.workflow, "seq": self.seq,
                "generation": self.generation, "status": self.status}


@dataclass(frozen=True, slots=True)
class WorkflowRun:
    """A run: its job's state (the run IS that job: `run_id` is its job id) and its history."""

    run_id: uuid.UUID
    workflow: str
    status: str  # the job's: queued (also while it sleeps or waits), running, succeeded, failed, canceled, lost
    input: Any
    result: Any
    error: str | None
    queue: str
    parent_run_id: uuid.UUID | None
    created_at: datetime
    finished_at: datetime | None
    available_at: datetime | None
    steps: list[Recorded] = field(default_factory=list)
    deadline_at: datetime | None = None  # when the run must have ended (None: never)
    generation: int = 0  # how many times it was restarted
    # the children of the generations a restart left (`get` only; empty in `result` and listings)
    earlier_children: list[EarlierChild] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.status in ("succeeded", "failed", "canceled", "lost")

    def shown(self) -> WorkflowRun:
        """As the principal in force may see it: input, result and the steps' results masked
        without READ_PAYLOAD (model/payload_crypto.py)."""
        if payload_crypto.may_read_payloads():
            return self
        return replace(payload_crypto.shown(self, "input", "result"),
                       steps=[payload_crypto.shown(s, "result") for s in self.steps])

    @classmethod
    def from_row(cls, row: Any, steps: list[Recorded], earlier_children: list[EarlierChild] | None = None
                 ) -> WorkflowRun:
        return cls(run_id=row["run_id"], workflow=row["workflow"], status=row["status"],
                   input=run_input(row),
                   result=decode(row["result"]), error=row["error"], queue=row["queue"],
                   parent_run_id=row["parent_run_id"], created_at=row["created_at"],
                   finished_at=row["finished_at"], available_at=row["available_at"], steps=steps,
                   deadline_at=row.get("deadline_at"), generation=row.get("generation") or 0,
                   earlier_children=earlier_children or [])

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": str(self.run_id), "workflow": self.workflow, "status": self.status,
                "input": self.input, "result": self.result, "error": self.error, "queue": self.queue,
                "parent_run_id": None if self.parent_run_id is None else str(self.parent_run_id),
                "created_at": iso_utc(self.created_at), "finished_at": iso_utc(self.finished_at),
                "available_at": iso_utc(self.available_at), "deadline_at": iso_utc(self.deadline_at),
                "generation": self.generation, "steps": [s.to_dict() for s in self.steps],
                "earlier_children": [c.to_dict() for c in self.earlier_children]}


@dataclass(frozen=True, slots=True)
class WorkflowRunSummary:
    """A run as a listing shows it: its job's state, without its input, result or history (they
    can be large; `get` has them)."""

    run_id: uuid.UUID
    workflow: str
    status: str
    queue: str
    parent_run_id: uuid.UUID | None
    error: str | None
    attempt: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    available_at: datetime | None

    @property
    def finished(self) -> bool:
        return self.status in ("succeeded", "failed", "canceled", "lost")

    @classmethod
    def from_row(cls, row: Any) -> WorkflowRunSummary:
        return cls(run_id=row["run_id"], workflow=row["workflow"], status=row["status"], queue=row["queue"],
                   parent_run_id=row["parent_run_id"], error=row["error"], attempt=row["attempt"],
                   created_at=row["created_at"], started_at=row["started_at"], finished_at=row["finished_at"],
                   available_at=row["available_at"])

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": str(self.run_id), "workflow": self.workflow, "status": self.status, "queue": self.queue,
                "parent_run_id": None if self.parent_run_id is None else str(self.parent_run_id),
                "error": self.error, "attempt": self.attempt, "created_at": iso_utc(self.created_at),
                "started_at": iso_utc(self.started_at), "finished_at": iso_utc(self.finished_at),
                "available_at": iso_utc(self.available_at)}


@dataclass(frozen=True, slots=True)
class WorkflowRunPage:
    """One page of runs, newest first. Pass `next_cursor` back for the next page; None on the last."""

    runs: list[WorkflowRunSummary]
    next_cursor: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [r.to_dict() for r in self.runs], "next_cursor": self.next_cursor}
