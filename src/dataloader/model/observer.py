"""Observers and nodes as every layer sees them: `ObserverSpec` (what to create, validated: the same
model behind `app.observers.create`, the HTTP body and the CLI) and the typed rows storage returns
(`Observer`, `Node`)."""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from pydantic import Field, field_validator

from dataloader.base import StrictModel
from dataloader.model.clock import iso_times

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@\-]*$"


class ObserverState(enum.StrEnum):
    """Seed 004's lifecycle, plus `failed` for an observer that used up its `max_restarts`."""

    CREATED = "created"  # waiting for a node with spare capacity (new, moved, or in restart backoff)
    PROCESSING = "processing"  # running on `node`
    ON_DELETING = "on_deleting"  # stop asked; its node is stopping it
    DELETED = "deleted"  # stopped; never runs again (the name may be created afresh)
    FAILED = "failed"  # crashed more than max_restarts times in a row; stop it, or create it afresh


class ObserverSpec(StrictModel):
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN,
                      description="Unique name (letters, digits, _ . : @ -), e.g. binance:BTC-USDT")
    kind: str = Field(min_length=1, max_length=200, description="The @observer definition that runs it")
    args: dict[str, Any] = Field(default_factory=dict, description="Its arguments (a JSON object)")
    max_restarts: int | None = Field(default=None, ge=0, le=1_000_000,
                                     description="Crashes in a row before it is left `failed` "
                                                 "(null: the kind's setting, else restart forever)")

    @field_validator("name", "kind")
    @classmethod
    def _text(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value

    def args_json(self) -> str:
        return json.dumps(self.args, ensure_ascii=False, allow_nan=False)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


@dataclass(frozen=True, slots=True)
class Observer:
    name: str
    kind: str
    args: dict[str, Any]
    state: ObserverState
    desired: str
    node_id: uuid.UUID | None
    node: str | None
    epoch: int
    failures: int
    max_restarts: int | None
    moves: int
    restart_at: datetime
    reason: str | None
    last_error: str | None
    last_error_at: datetime | None
    checkpoint: Any
    status: Any
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    stop_requested_at: datetime | None
    stopped_at: datetime | None

    @classmethod
    def from_row(cls, row: Any) -> Observer:
        return cls(name=row["name"], kind=row["kind"], args=_json(row["args"]), state=ObserverState(row["state"]),
                   desired=row["desired"], node_id=row["node_id"], node=row.get("node_name"), epoch=row["epoch"],
                   failures=row["failures"], max_restarts=row["max_restarts"], moves=row["moves"],
                   restart_at=row["restart_at"], reason=row["reason"], last_error=row["last_error"],
                   last_error_at=row["last_error_at"], checkpoint=_json(row["checkpoint"]),
                   status=_json(row["status"]), created_at=row["created_at"], updated_at=row["updated_at"],
                   started_at=row["started_at"], stop_requested_at=row["stop_requested_at"],
                   stopped_at=row["stopped_at"])

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["state"] = self.state.value
        body["node_id"] = str(self.node_id) if self.node_id else None
        return iso_times(body)


@dataclass(frozen=True, slots=True)
class Node:
    node_id: uuid.UUID
    name: str
    host: str
    pid: int
    version: str
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age_sec: float
    capacity: int
    running: int
    queues: list[str]
    kinds: list[str]
    state: str  # live, superseded (a newer incarnation of the name started), dead, stopped
    stopped_at: datetime | None
    superseded_by: uuid.UUID | None

    @classmethod
    def from_row(cls, row: Any) -> Node:
        return cls(node_id=row["node_id"], name=row["name"], host=row["host"], pid=row["pid"],
                   version=row["version"], started_at=row["started_at"], heartbeat_at=row["heartbeat_at"],
                   heartbeat_age_sec=row.get("heartbeat_age_sec") or 0.0, capacity=row["capacity"],
                   running=row.get("running") or 0, queues=list(row["queues"]), kinds=list(row["kinds"]),
                   state=row["state"], stopped_at=row["stopped_at"], superseded_by=row["superseded_by"])

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["node_id"] = str(self.node_id)
        body["superseded_by"] = str(self.superseded_by) if self.superseded_by else None
        return iso_times(body)
