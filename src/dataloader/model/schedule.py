"""A schedule as every layer sees it: `ScheduleSpec` (what to enqueue and when, validated: the same
model behind `@schedule`, `app.schedules.create`, the HTTP body and the CLI), and the typed rows
storage returns (`Schedule`, `ScheduleRun`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field, field_validator, model_validator

from dataloader.base import StrictModel
from dataloader.model.schedule_timing import InvalidTiming, MissedPolicy, Timing, check_zone_name
from dataloader.model.storable import json_text_problem

PG_INT_MAX = 2**31 - 1
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@\-]*$"


class ScheduleSpec(StrictModel):
    """What a schedule enqueues and when. Exactly one of `cron` and `every_sec`."""

    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN,
                      description="Unique name (letters, digits, _ . : @ -); part of each tick's idempotency key")
    task: str = Field(min_length=1, max_length=200, description="Pipeline the jobs run")
    cron: str | None = Field(default=None, max_length=200,
                             description="5-field cron (minute hour day month weekday) or @hourly/@daily/…, "
                                         "in `tz`")
    every_sec: float | None = Field(default=None, ge=1, le=366 * 86400,
                                    description="Fixed interval in seconds (ticks at multiples of it since the "
                                                "Unix epoch)")
    tz: str = Field(default="UTC", min_length=1, max_length=64, description="IANA time zone of `cron`")
    args: dict[str, Any] = Field(default_factory=dict, description="Args of every job (a JSON object)")
    queue: str = Field(default="default", min_length=1, max_length=200)
    missed: MissedPolicy = Field(default=MissedPolicy.run_once,
                                 description="Ticks missed while no scheduler ran: skip, run_once, catch_up")
    catch_up_limit: int = Field(default=10, ge=1, le=1000, description="catch_up: at most this many missed ticks")
    grace_sec: int = Field(default=60, ge=0, le=86400,
                           description="A due tick at most this late is on time (runs under every policy)")
    lock_key: str | None = Field(default=None, min_length=1, max_length=512,
                                 description="lock_key of every job (e.g. the name: runs never overlap); "
                                             "default: each job its own")
    priority: int = Field(default=100, ge=0, le=PG_INT_MAX)
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    lease_ttl_sec: int | None = Field(default=None, ge=1, le=7 * 24 * 3600)
    paused: bool = Field(default=False, description="Created paused (resume starts it)")

    @field_validator("name", "task", "queue", "lock_key", "cron", "tz")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if "\x00" in value:
            raise ValueError("must not contain NUL characters")
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("tz")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            return check_zone_name(value)
        except InvalidTiming as exc:
            raise ValueError(str(exc)) from None

    @field_validator("args")
    @classmethod
    def _json_args(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            encoded = json.dumps(value, allow_nan=False)
        except (ValueError, TypeError, RecursionError) as exc:
            raise ValueError(f"must be a JSON object PostgreSQL can store: {exc}") from None
        problem = json_text_problem(value, encoded)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _timing(self) -> ScheduleSpec:
        try:
            self.timing()
        except InvalidTiming as exc:
            raise ValueError(str(exc)) from None
        return self

    def timing(self) -> Timing:
        every = None if self.every_sec is None else timedelta(milliseconds=round(self.every_sec * 1000))
        return Timing(cron=self.cron, every=every, tz=self.tz)

    def args_json(self) -> str:
        return json.dumps(self.args, allow_nan=False)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A row of `dl_schedules`."""

    name: str
    task: str
    queue: str
    args: Any
    cron: str | None
    every_sec: float | None
    tz: str
    missed: MissedPolicy
    catch_up_limit: int
    grace_sec: int
    lock_key: str | None
    priority: int
    max_attempts: int | None
    lease_ttl_sec: int | None
    paused: bool
    source: str  # "code" (declared with @schedule) or "api"
    revision: int
    next_run_at: datetime
    last_run_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Schedule:
        args = row["args"]
        every_ms = row["every_ms"]
        return cls(
            name=row["name"], task=row["task"], queue=row["queue"],
            args=json.loads(args) if isinstance(args, str) else args,
            cron=row["cron"], every_sec=None if every_ms is None else every_ms / 1000, tz=row["timezone"],
            missed=MissedPolicy(row["missed"]), catch_up_limit=row["catch_up_limit"], grace_sec=row["grace_sec"],
            lock_key=row["lock_key"], priority=row["priority"], max_attempts=row["max_attempts"],
            lease_ttl_sec=row["lease_ttl_sec"], paused=row["paused"], source=row["source"],
            revision=row["revision"], next_run_at=row["next_run_at"], last_run_at=row["last_run_at"],
            created_at=row["created_at"], updated_at=row["updated_at"],
        )

    def timing(self) -> Timing:
        try:  # every_ms is a bigint: a hand-written one may be past what a timedelta holds
            every = None if self.every_sec is None else timedelta(milliseconds=round(self.every_sec * 1000))
        except OverflowError:
            raise InvalidTiming("every must be between 1 second and 366 days") from None
        return Timing(cron=self.cron, every=every, tz=self.tz)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["missed"] = self.missed.value
        return out


@dataclass(frozen=True, slots=True)
class ScheduleRun:
    """One tick that enqueued a job (a row of `dl_schedule_runs`), with the job's status now (None
    once the job was deleted by retention)."""

    schedule_name: str
    tick_at: datetime
    job_id: uuid.UUID
    enqueued_at: datetime
    lag_sec: float
    skipped_before: int  # ticks skipped (missed-tick policy) between the previous run and this one
    job_status: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ScheduleRun:
        return cls(schedule_name=row["schedule_name"], tick_at=row["tick_at"], job_id=row["job_id"],
                   enqueued_at=row["enqueued_at"], lag_sec=row["lag_sec"], skipped_before=row["skipped_before"],
                   job_status=row["job_status"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
