"""The enqueue parameters, defined once: `EnqueueOptions` names the keyword arguments of
`App.enqueue` and `SyncApp.enqueue` (and the keys of an `enqueue_many` mapping), `job_request`
turns them into the `JobRequest` that JobManager enqueues, and `batch_items` does it for a batch.
The CLI builds its request with `job_request` too, so every Python face gives the same model,
defaults and errors as the HTTP body."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from typing_extensions import TypedDict

from dataloader.exceptions import ValidationFailed
from dataloader.jobs.manager import JobRequest, plain_jobs
from dataloader.model.chain import MAX_STAGE_DELAY_SEC as MAX_DELAY_SEC
from dataloader.model.chain import Stage


class EnqueueOptions(TypedDict, total=False):
    """enqueue's keyword arguments (App.enqueue's docstring says what each means)."""

    queue: str  # default "default"
    lock_key: str | None  # default: the job's own id
    idempotency_key: str | None
    partition_key: str  # default ""
    priority: int  # default 100
    available_at: datetime | None
    delay: float | timedelta | None
    max_attempts: int | None
    lease_ttl_sec: int | None
    timeout_sec: int | None
    then: Sequence[Stage]
    restartable: bool
    unique_for: float | timedelta | None
    unique_key: str | None


ENQUEUE_OPTIONS = frozenset(EnqueueOptions.__annotations__)


def check_options(method: str, options: Mapping[str, Any]) -> None:
    """The TypeError Python gives a keyword the signature does not have."""
    for name in options:
        if name not in ENQUEUE_OPTIONS:
            raise TypeError(f"{method}() got an unexpected keyword argument {name!r}")


def enqueue_request(task: str, args: Mapping[str, Any] | None, method: str,
                    options: EnqueueOptions) -> JobRequest:
    """`App.enqueue`'s and `SyncApp.enqueue`'s request: their keyword arguments checked as a
    signature would check them, then `job_request`."""
    check_options(method, options)
    return job_request(task, args, **options)


def job_request(task: str, args: Mapping[str, Any] | None = None, *, queue: str = "default",
                lock_key: str | None = None, delay: float | timedelta | None = None,
                available_at: datetime | None = None, default_lock_key: str | None = None,
                then: Sequence[Stage] | None = None, restartable: bool = False,
                unique_for: float | timedelta | None = None, **fields: Any) -> JobRequest:
    """The JobRequest behind enqueue's keyword arguments, without enqueuing it (shared by App,
    SyncApp, enqueue_many and the CLI): every problem is a ValidationFailed with the code HTTP
    gives the same body."""
    try:
        if delay is not None:
            if available_at is not None:
                raise ValidationFailed("give available_at or delay, not both",
                                       [{"loc": ["delay"], "msg": "give available_at or delay, not both",
                                         "type": "value_error"}])
            available_at = datetime.now(UTC) + timedelta(seconds=delay_seconds(delay))
        if then:
            fields["then"] = list(then)
        if unique_for is not None:
            seconds = unique_for.total_seconds() if isinstance(unique_for, timedelta) else unique_for
            if isinstance(seconds, float) and seconds.is_integer():
                seconds = int(seconds)
            fields["unique_for_sec"] = seconds
        if args is not None and not isinstance(args, Mapping):
            raise ValidationFailed(f"args: must be a mapping (a JSON object), got {type(args).__name__}",
                                   [{"loc": ["args"], "msg": "must be a mapping (a JSON object)",
                                     "type": "dict_type"}])
        # model_validate of a dict: a third cheaper than the keyword constructor (enqueue_many
        # builds one per job). A missing lock_key stays None: the job's own id (JobManager).
        return JobRequest.model_validate({
            "task": task, "args": dict(args or {}), "queue": queue,
            "lock_key": lock_key or default_lock_key, "available_at": available_at,
            **({"restartable": restartable} if restartable else {}),
            **{k: v for k, v in fields.items() if v is not None}})
    except ValidationError as exc:
        raise ValidationFailed.from_errors(exc.errors()) from None


def batch_items(jobs: Iterable[JobRequest | Mapping[str, Any]]) -> list[Any]:
    """enqueue_many's items as `JobManager.batch_columns` takes them: validated in one call when
    they are all plain (`plain_jobs`), else a JobRequest each."""
    items = list(jobs)
    plain = plain_jobs(items)
    if plain is not None:
        return plain
    return [item if isinstance(item, JobRequest) else job_request(**dict(item)) for item in items]


def delay_seconds(delay: float | timedelta) -> float:
    """A delay as seconds: a finite number, 0 or more (a negative delay is a mistake, as in Stage)."""
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = float(delay)
    else:
        raise ValidationFailed(f"delay: must be seconds or a timedelta, got {type(delay).__name__}",
                               [{"loc": ["delay"], "msg": "must be seconds or a timedelta", "type": "float_type"}])
    if not 0 <= seconds <= MAX_DELAY_SEC:  # also NaN
        raise ValidationFailed(f"delay: must be between 0 and {MAX_DELAY_SEC:.0f} seconds, got {delay}",
                               [{"loc": ["delay"], "msg": "must be between 0 and a year", "type": "value_error"}])
    return seconds
