"""Which processes a bulk process operation acts on: a namespace, and optionally their
statuses, their ids, and a pattern over their `detail` (the error text of a process in `error`;
`*` any text, `?` one character, case-insensitive, as the job filter's `error`). One value for
the Python API, HTTP and the CLI; stored with the operation and shown back to the operator."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from dataloader.base import StrictModel
from dataloader.model.job_filter import check_glob, glob_to_ilike
from dataloader.model.process import NS_PATTERN, ProcessStatus

MAX_IDS = 10_000


class ProcessFilter(StrictModel):
    ns: str = Field(pattern=NS_PATTERN, description="The namespace")
    statuses: list[ProcessStatus] | None = Field(default=None, max_length=3, description="Any of these statuses")
    ids: list[str] | None = Field(default=None, max_length=MAX_IDS, description="Only these process ids")
    detail: str | None = Field(default=None, min_length=1, max_length=1000,
                               description="Pattern over the process's detail (its error): * any text, ? one char")

    @field_validator("statuses")
    @classmethod
    def _statuses(cls, values: list[ProcessStatus] | None) -> list[ProcessStatus] | None:
        if values is not None and not values:
            raise ValueError("must name at least one (leave it out to match any)")
        return None if values is None else sorted(set(values))

    @field_validator("ids")
    @classmethod
    def _ids(cls, values: list[str] | None) -> list[str] | None:
        if values is None:
            return None
        if not values:
            raise ValueError("must name at least one (leave it out to match any)")
        for value in values:
            if not value.strip() or len(value) > 200 or "\x00" in value:
                raise ValueError("each id must be 1-200 characters, not blank, without NUL")
        return sorted(set(values))

    @field_validator("detail")
    @classmethod
    def _detail(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return None if value is None else check_glob(value)

    def params(self) -> tuple[Any, ...]:
        """$1..$4 of processes/select_*.sql."""
        return (self.ns, [s.value for s in self.statuses] if self.statuses else None, self.ids,
                None if self.detail is None else glob_to_ilike(self.detail))

    def describe(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


__all__ = ["ProcessFilter"]
