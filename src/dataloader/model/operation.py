"""Bulk operations as values: their kinds, their states, an operation's row, a dry run's count and an
entry of its audit trail. The rules live in operations/; these are shared by every face."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dataloader.model.clock import iso

JOB_KINDS = ("requeue", "cancel", "delete", "set_priority")
# Over processes (filter: ProcessFilter); started by app.processes.restart_many.
PROCESS_KINDS = ("process_restart",)
# Over workflow runs (filter: RunFilter); started by app.workflows.cancel_many / restart_many / retry_many.
WORKFLOW_KINDS = ("workflow_cancel", "workflow_restart", "workflow_retry")
KINDS = JOB_KINDS + PROCESS_KINDS + WORKFLOW_KINDS
STATES = ("running", "paused", "canceled", "finished", "failed")
ENDED_STATES = frozenset({"canceled", "finished", "failed"})


@dataclass(frozen=True, slots=True)
class Operation:
    id: uuid.UUID
    kind: str
    filter: dict[str, Any]
    params: dict[str, Any]
    state: str
    total: int  # jobs the filter matched when it started (the dry-run count)
    done: int  # jobs examined so far
    changed: int  # of those, jobs changed (the others were no longer eligible, or refused)
    batch_size: int
    started_by: str
    created_at: datetime
    updated_at: datetime
    snapshot_at: datetime
    finished_at: datetime | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    lease_epoch: int = 0
    error: str | None = None
    failed: int = 0  # of those examined, refused for a reason of their own (a workflow run's unknown step)

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES

    @property
    def skipped(self) -> int:
        """Examined but no longer eligible (a job that succeeded meanwhile, a run not ended)."""
        return self.done - self.changed - self.failed

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Operation:
        return cls(id=row["operation_id"], kind=row["kind"], filter=row["filter"], params=row["params"],
                   state=row["state"], total=row["total"], done=row["done"], changed=row["changed"],
                   batch_size=row["batch_size"], started_by=row["started_by"], created_at=row["created_at"],
                   updated_at=row["updated_at"], snapshot_at=row["snapshot_at"], finished_at=row["finished_at"],
                   lease_owner=row["lease_owner"], lease_expires_at=row["lease_expires_at"],
                   lease_epoch=row["lease_epoch"], error=row["error"], failed=row.get("failed") or 0)

    def to_dict(self) -> dict[str, Any]:
        data = {"operation_id": str(self.id), "kind": self.kind, "filter": self.filter, "params": self.params,
                "state": self.state, "total": self.total, "done": self.done, "changed": self.changed,
                "skipped": self.skipped, "failed": self.failed, "batch_size": self.batch_size,
                "started_by": self.started_by,
                "created_at": self.created_at, "updated_at": self.updated_at, "snapshot_at": self.snapshot_at,
                "finished_at": self.finished_at, "runner": self.lease_owner,
                "lease_expires_at": self.lease_expires_at, "error": self.error}
        return {k: iso(v) if isinstance(v, datetime) else v for k, v in data.items()}


@dataclass(frozen=True, slots=True)
class DryRun:
    """What an operation would do, without doing it."""

    kind: str
    filter: dict[str, Any]
    params: dict[str, Any]
    total: int
    # A workflow operation's: the matched runs by status (a restart skips those not ended, a cancel
    # those ended) and the first few it would examine, oldest first.
    by_status: dict[str, int] | None = None
    sample: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {"dry_run": True, "kind": self.kind, "filter": self.filter, "params": self.params, "total": self.total}
        if self.by_status is not None:
            data["by_status"] = self.by_status
        if self.sample is not None:
            data["sample"] = self.sample
        return data


@dataclass(frozen=True, slots=True)
class OperationEvent:
    event_id: int
    ts: datetime
    kind: str
    actor: str | None
    payload: Any

    def to_dict(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "ts": iso(self.ts), "kind": self.kind, "actor": self.actor,
                "payload": self.payload}
