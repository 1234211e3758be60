"""Which workflow runs a bulk workflow operation acts on: a workflow's name, the runs' statuses
(their jobs', as `app.workflows.list` knows them), a created range, and whether only top-level runs
(a child is canceled with its parent anyway). One value for the Python API, HTTP, the CLI and the
console; stored with the operation and shown back to the operator. An empty filter matches every
run, as an empty job filter matches every job: the dry run and the confirmation say how many."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, Field, field_validator, model_validator

from dataloader.base import StrictModel
from dataloader.model.clock import refuse_number_as_time
from dataloader.model.job import JobStatus
from dataloader.model.job_filter import storable_time
from dataloader.model.workflow import check_name


class RunFilter(StrictModel):
    workflow: str | None = Field(default=None, description="Only this workflow's runs")
    statuses: list[JobStatus] | None = Field(default=None, max_length=6,
                                             description="Any of these statuses (the run's job's)")
    created_from: AwareDatetime | None = Field(default=None, description="Started at or after this")
    created_to: AwareDatetime | None = Field(default=None, description="Started before this")
    top_level: bool | None = Field(default=None, strict=True,
                                   description="Only runs no gather started (true), only children (false)")

    @field_validator("workflow")
    @classmethod
    def _workflow(cls, value: str | None) -> str | None:
        return None if value is None else check_name("workflow", value)

    @field_validator("statuses")
    @classmethod
    def _statuses(cls, values: list[JobStatus] | None) -> list[JobStatus] | None:
        if values is not None and not values:
            raise ValueError("must name at least one (leave it out to match any)")
        return None if values is None else sorted(set(values), key=list(JobStatus).index)

    @field_validator("created_from", "created_to", mode="before")
    @classmethod
    def _no_number(cls, value: object) -> object:
        return refuse_number_as_time(value)

    @field_validator("created_from", "created_to")
    @classmethod
    def _storable_time(cls, value: datetime | None) -> datetime | None:
        return storable_time(value)

    @model_validator(mode="after")
    def _range(self) -> RunFilter:
        if self.created_from is not None and self.created_to is not None and self.created_from >= self.created_to:
            raise ValueError("created_from must be before created_to")
        return self

    def params(self) -> tuple[Any, ...]:
        """$1..$5 of workflows/select_filter.sql."""
        return (self.workflow, [s.value for s in self.statuses] if self.statuses else None, self.created_from,
                self.created_to, self.top_level)

    def describe(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


__all__ = ["RunFilter"]
