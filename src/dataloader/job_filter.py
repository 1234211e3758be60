"""The operator's job filter: which jobs a search lists, a count counts and a bulk operation acts
on (issue 11). One value for every face (Python, HTTP, CLI) and every use, so "the jobs I saw in the
search" and "the jobs the bulk requeue touched" are the same set by construction.

Every field narrows the set; an empty filter matches every job. `error` is a case-insensitive
pattern over the whole error text where `*` is any run of characters and `?` one character
("*ConnectionResetError*", "ImportError: *"). `args_contains` is a JSON object the job's args must
contain (jsonb `@>`); `args_path` a jsonpath that must find something in them (jsonb `@?`, e.g.
`$.customer ? (@ == "acme")`). A leaf module: every layer may use it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic import AwareDatetime, Field, field_validator, model_validator

from dataloader.base import StrictModel
from dataloader.job import JobStatus

_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = datetime(9999, 1, 1, tzinfo=UTC)


def glob_to_ilike(pattern: str) -> str:
    """An operator's pattern as ILIKE's: * and ? become % and _, and their own % _ \\ match
    themselves."""
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


class JobFilter(StrictModel):
    queues: list[str] | None = Field(default=None, max_length=100, description="Any of these queues")
    tasks: list[str] | None = Field(default=None, max_length=100, description="Any of these tasks")
    statuses: list[JobStatus] | None = Field(default=None, max_length=6, description="Any of these statuses")
    error: str | None = Field(default=None, min_length=1, max_length=1000,
                              description="Error text pattern, case-insensitive: * any text, ? one character")
    created_from: AwareDatetime | None = Field(default=None, description="created_at >= this")
    created_to: AwareDatetime | None = Field(default=None, description="created_at < this")
    finished_from: AwareDatetime | None = Field(default=None, description="finished_at >= this")
    finished_to: AwareDatetime | None = Field(default=None, description="finished_at < this")
    args_contains: dict[str, Any] | None = Field(default=None, description="JSON object the args contain (@>)")
    args_path: str | None = Field(default=None, min_length=1, max_length=1000,
                                  description="jsonpath that must match in the args (@?)")
    lock_key_prefix: str | None = Field(default=None, min_length=1, max_length=512)
    held: bool | None = Field(default=None, description="Only held jobs (true), only not held (false)")

    @field_validator("queues", "tasks")
    @classmethod
    def _names(cls, values: list[str] | None) -> list[str] | None:
        if values is None:
            return None
        if not values:
            raise ValueError("must name at least one (leave it out to match any)")
        for value in values:
            if not value or len(value) > 200 or "\x00" in value:
                raise ValueError("each must be 1-200 characters without NUL")
        return sorted(set(values))

    @field_validator("statuses")
    @classmethod
    def _statuses(cls, values: list[JobStatus] | None) -> list[JobStatus] | None:
        if values is not None and not values:
            raise ValueError("must name at least one (leave it out to match any)")
        return None if values is None else sorted(set(values))

    @field_validator("error", "args_path", "lock_key_prefix")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value

    @field_validator("args_contains")
    @classmethod
    def _args(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        try:
            encoded = json.dumps(value, allow_nan=False)
        except (ValueError, TypeError, RecursionError):
            raise ValueError("must be a JSON object without NaN or Infinity") from None
        if "\\u0000" in encoded or len(encoded) > 64 * 1024:
            raise ValueError("must be at most 64 KiB of JSON without NUL characters")
        return value

    @field_validator("created_from", "created_to", "finished_from", "finished_to")
    @classmethod
    def _storable_time(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        try:
            in_range = _EARLIEST <= value.astimezone(UTC) <= _LATEST
        except OverflowError:  # 9999-12-31T23:00:00-05:00 is past datetime.max in UTC
            in_range = False
        if not in_range:
            raise ValueError("must be between 1970-01-01 and 9999-01-01")
        return value

    @model_validator(mode="after")
    def _ranges(self) -> JobFilter:
        for name, low, high in (("created", self.created_from, self.created_to),
                                ("finished", self.finished_from, self.finished_to)):
            if low is not None and high is not None and low >= high:
                raise ValueError(f"{name}_from must be before {name}_to")
        return self

    def error_like(self) -> str | None:
        """`error` as an ILIKE pattern: the user's * and ? become % and _, and their own % _ \\
        match themselves."""
        return None if self.error is None else glob_to_ilike(self.error)

    def describe(self) -> dict[str, Any]:
        """The filter as JSON (stored with a bulk operation; shown back to the operator)."""
        return self.model_dump(mode="json", exclude_none=True)

    @property
    def times(self) -> tuple[datetime | None, datetime | None, datetime | None, datetime | None]:
        return self.created_from, self.created_to, self.finished_from, self.finished_to
