"""The values of processes: what a processor receives (`ProcessTask`, `Process`, `Event`) and what
it returns (`Intent` with an optional `SetTimer` / `UnsetTimer` action), the retry policy of timer
tasks, and the history range of a read. Pure data: no I/O, no SQL."""

from __future__ import annotations

import base64
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from dataloader.model import payload_crypto
from dataloader.model.clock import iso
from dataloader.model.payload_crypto import shown


class ProcessStatus(StrEnum):
    init = "init"
    running = "running"
    error = "error"


class TaskType(StrEnum):
    init = "init"
    call = "call"
    repair = "repair"
    timeout = "timeout"
    remove = "remove"


# Tasks a caller starts and waits for; they run before any timer of their process (priority).
CALLER_TASKS = frozenset({TaskType.init, TaskType.call, TaskType.repair})
TIMER_TASKS = frozenset({TaskType.timeout, TaskType.remove})
# dl_jobs priorities (lower runs first): a queued call or repair is always claimed before a due
# timer of the same process, so the timer waits behind it.
# A namespace is its processor's name: what a URL path segment and a label can carry.
NS_PATTERN = r"^[A-Za-z0-9_.\-]{1,100}$"
CALLER_PRIORITY = 10
TIMER_PRIORITY = 20


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a process's history. `event_id` increases by one per process from 1."""

    event_id: int
    timestamp: datetime
    payload: Any
    metadata: Any = None
    task_id: uuid.UUID | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "timestamp": iso(self.timestamp), "payload": self.payload,
                "metadata": self.metadata, "task_id": str(self.task_id) if self.task_id else None}


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event a processor emits (a bare payload is wrapped into one)."""

    payload: Any
    metadata: Any = None


# The largest event id a request may name (an offset, an imported event, a restart point): a
# bigint with room to spare, one bound in every face (the HTTP API's OpenAPI maxima say it exactly).
MAX_EVENT_ID = 2**62 - 1


@dataclass(frozen=True, slots=True)
class HistoryRange:
    """Which events to read. `forward`: events after `offset` (0: from the first), oldest first.
    `backward`: events before `offset` (0: from the last), newest first. `limit` None: all."""

    offset: int = 0
    limit: int | None = None
    direction: Literal["forward", "backward"] = "forward"

    def __post_init__(self) -> None:
        if not isinstance(self.offset, int) or isinstance(self.offset, bool) or not 0 <= self.offset <= MAX_EVENT_ID:
            raise ValueError(f"range offset must be an event id from 0 to {MAX_EVENT_ID}")
        if self.limit is not None and (not isinstance(self.limit, int) or isinstance(self.limit, bool)
                                       or not 1 <= self.limit <= 100_000):
            raise ValueError("range limit must be between 1 and 100000")
        if self.direction not in ("forward", "backward"):
            raise ValueError("range direction must be 'forward' or 'backward'")

    @classmethod
    def of(cls, value: HistoryRange | Mapping[str, Any] | None) -> HistoryRange:
        if value is None:
            return cls()
        if isinstance(value, HistoryRange):
            return value
        if not isinstance(value, Mapping):
            raise ValueError("range must be a mapping with offset, limit and direction")
        unknown = set(value) - {"offset", "limit", "direction"}
        if unknown:
            raise ValueError(f"unknown range field(s): {', '.join(sorted(map(str, unknown)))}")
        return cls(**dict(value))

    def to_dict(self) -> dict[str, Any]:
        return {"offset": self.offset, "limit": self.limit, "direction": self.direction}


@dataclass(frozen=True, slots=True)
class Timer:
    """The armed timer of a process: a `timeout` (the processor runs) or a `remove` (the process is
    deleted) at `at`."""

    type: str
    at: datetime
    task_id: uuid.UUID | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "at": iso(self.at),
                "task_id": str(self.task_id) if self.task_id else None}


@dataclass(frozen=True, slots=True)
class Process:
    ns: str
    id: str
    status: ProcessStatus
    detail: str | None
    aux_state: Any
    metadata: Any
    corrupted_by: uuid.UUID | None
    previous_status: ProcessStatus | None
    status_changed_at: datetime
    created_at: datetime
    last_event_id: int
    history: list[Event] = field(default_factory=list)
    timer: Timer | None = None
    # Armed timer that was suspended when the process went to `error`: re-armed by a repair.
    suspended_timer: Timer | None = None

    def shown(self) -> Process:
        """As the principal in force may see it: aux state and events' payloads masked without
        READ_PAYLOAD (model/payload_crypto.py)."""
        if payload_crypto.may_read_payloads():
            return self
        return replace(shown(self, "aux_state"), history=[shown(e, "payload") for e in self.history])

    def to_dict(self) -> dict[str, Any]:
        aux = self.aux_state
        if isinstance(aux, bytes):
            aux = {"$bytes": base64.b64encode(aux).decode()}
        return {
            "ns": self.ns, "id": self.id, "status": self.status.value, "detail": self.detail, "aux_state": aux,
            "metadata": self.metadata, "corrupted_by": str(self.corrupted_by) if self.corrupted_by else None,
            "previous_status": self.previous_status.value if self.previous_status else None,
            "status_changed_at": iso(self.status_changed_at), "created_at": iso(self.created_at),
            "last_event_id": self.last_event_id, "history": [e.to_dict() for e in self.history],
            "timer": self.timer.to_dict() if self.timer else None,
        }


@dataclass(frozen=True)
class TraceEntry:
    """One task of a process with the events it wrote, oldest first (`processes.trace`). `task` is
    the task's row (storage's TaskRecord: task_id, type, args, status, response, error, times,
    attempts, restart_of), None for the events an import (`put`) wrote, which belong to no task.
    Its fields read through the entry (`entry.status`, `entry.task_id`); `entry["status"]` reads
    the JSON form, as the dicts this returned before did."""

    task: Any
    events: list[Event] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        if name == "task" or name.startswith("__"):  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        task = self.task
        if task is None:
            imported = {"task_id": None, "type": "import"}
            if name in imported:
                return imported[name]
            raise AttributeError(name)
        return getattr(task, name)

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def to_dict(self) -> dict[str, Any]:
        head = self.task.to_dict() if self.task is not None else {"task_id": None, "type": "import"}
        return {**head, "events": [e.to_dict() for e in self.events]}


@dataclass(frozen=True, slots=True)
class ProcessTask:
    """The task a processor is asked to handle."""

    task_id: uuid.UUID
    type: TaskType
    args: Any
    attempt: int
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class SetTimer:
    """Arm the process's one timer at `at` (an aware datetime) or `after` seconds from now; it
    replaces any pending timer. With `remove=True` the process is deleted at that time instead of
    the processor being called with `timeout`."""

    at: datetime | None = None
    after: float | timedelta | None = None
    remove: bool = False

    def __post_init__(self) -> None:
        if (self.at is None) == (self.after is None):
            raise ValueError("SetTimer needs exactly one of at= and after=")
        if self.at is not None and (not isinstance(self.at, datetime) or self.at.tzinfo is None):
            raise ValueError("SetTimer at= must be an aware datetime")
        if self.after is not None:
            seconds = self.after.total_seconds() if isinstance(self.after, timedelta) else self.after
            if (not isinstance(seconds, int | float) or isinstance(seconds, bool) or math.isnan(seconds)
                    or not 0 <= seconds <= 10 * 365 * 86400):
                raise ValueError("SetTimer after= must be 0 to 10 years (seconds or a timedelta)")

    def due(self, now: datetime | None = None) -> datetime:
        if self.at is not None:
            return self.at
        seconds = self.after.total_seconds() if isinstance(self.after, timedelta) else float(self.after)  # type: ignore[arg-type]
        return (now or datetime.now(UTC)) + timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True)
class UnsetTimer:
    """Disarm the pending timer, if any."""


Action = SetTimer | UnsetTimer


@dataclass(frozen=True, slots=True)
class Intent:
    """What a processor returns: new `events` (payloads or `NewEvent`s), an optional `action`, the
    `response` for the caller, and optionally a new `aux_state` and `metadata`."""

    events: list[Any] = field(default_factory=list)
    action: Action | None = None
    response: Any = None
    aux_state: Any = UNSET
    metadata: Any = UNSET


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed `timeout` or `remove` task is retried: after `initial_timeout` seconds, then
    each delay times `backoff_coefficient`, capped at `max_timeout`, for `max_attempts` attempts
    in all. An error whose type (or type name) is in `non_retryable_errors` is not retried."""

    initial_timeout: float = 5.0
    backoff_coefficient: float = 2.0
    max_timeout: float = 180.0
    max_attempts: int = 3
    non_retryable_errors: tuple[type[BaseException] | str, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.initial_timeout <= 86400 or not 0 <= self.max_timeout <= 86400:
            raise ValueError("retry timeouts must be 0 to 86400 seconds")
        if not 1 <= self.backoff_coefficient <= 100:
            raise ValueError("backoff_coefficient must be 1 to 100")
        if not 1 <= self.max_attempts <= 100:
            raise ValueError("max_attempts must be 1 to 100")

    def delay(self, attempt: int) -> float:
        """Seconds before the attempt after `attempt` (1-based)."""
        exponent = min(max(attempt - 1, 0), 60)
        return min(self.initial_timeout * self.backoff_coefficient ** exponent, self.max_timeout)

    def retryable(self, exc: BaseException) -> bool:
        from dataloader.exceptions import FatalError

        if isinstance(exc, FatalError):
            return False
        for entry in self.non_retryable_errors:
            if isinstance(entry, str):
                if any(cls.__name__ == entry or f"{cls.__module__}.{cls.__qualname__}" == entry
                       for cls in type(exc).__mro__):
                    return False
            elif isinstance(exc, entry):
                return False
        return True
