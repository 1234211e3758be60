"""Chains: what runs after a job succeeds. `Stage` describes the next job; `Then` is what a pipeline
returns to choose its next stages at run time (docs/patterns.md "Chains and stages").

    app.enqueue("extract", {"day": "2026-11-01"}, then=[Stage("transform"), Stage("load", queue="db")])

    @pipeline("split")
    async def split(ctx):
        parts = await list_parts(ctx.args["file"])
        return Then(*(Stage("load_part", {"part": p}) for p in parts), result={"parts": len(parts)})

A stage is enqueued by the statement that finishes its parent as succeeded, so a crash can neither
lose nor double it. Every stage of a run carries the first job's id as `chain_id`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator

from dataloader.base import StrictModel

PG_INT_MAX = 2**31 - 1
MAX_STAGE_DELAY_SEC = 365 * 24 * 3600.0
MAX_STAGES = 1000  # next jobs one finish may enqueue (fan-out), and stages planned ahead


class Stage(StrictModel):
    """A job to enqueue when the previous one succeeds.

    `queue` defaults to the parent's queue, `lease_ttl_sec` to the parent's, `lock_key` to the new
    job's own id. A stage planned at enqueue (`then=`) receives `{**args, "input": <the parent's
    result>}` (the result only when there is one); a stage in a returned `Then` gets exactly its
    `args`. `then`: the stages that follow this one, in order.
    """

    task: str = Field(min_length=1, max_length=200)
    args: dict[str, Any] = Field(default_factory=dict)
    queue: str | None = Field(default=None, min_length=1, max_length=200)
    lock_key: str | None = Field(default=None, min_length=1, max_length=512)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=512)
    # Numbers are strict, as in JobRequest: "5" is refused in every face (docs/errors.md).
    priority: int = Field(default=100, ge=0, le=PG_INT_MAX, strict=True)
    max_attempts: int | None = Field(default=None, ge=1, le=1000, strict=True)
    lease_ttl_sec: int | None = Field(default=None, ge=1, le=7 * 24 * 3600, strict=True)
    timeout_sec: int | None = Field(default=None, ge=1, le=7 * 24 * 3600, strict=True)
    delay_sec: float = Field(default=0.0, ge=0, le=MAX_STAGE_DELAY_SEC, allow_inf_nan=False, strict=True)
    then: list[Stage] = Field(default_factory=list, max_length=MAX_STAGES)

    def __init__(self, task: str | None = None, args: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
        if task is not None:
            fields["task"] = task
        if args is not None:
            fields["args"] = args
        super().__init__(**fields)

    @field_validator("task", "queue", "lock_key", "idempotency_key")
    @classmethod
    def _plain_text(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.strip() or "\x00" in value:
            raise ValueError("must not be blank or contain NUL characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("must not contain unpaired UTF-16 surrogates") from None
        return value


class Then:
    """Returned by a pipeline: succeed with `result` and enqueue `stages` next (several stages run
    side by side: a fan-out). It replaces the stages planned at enqueue, if any."""

    __slots__ = ("result", "stages")

    def __init__(self, *stages: Stage, result: Any = None) -> None:
        if not stages:
            raise ValueError("Then needs at least one Stage")
        if len(stages) > MAX_STAGES:
            raise ValueError(f"Then takes at most {MAX_STAGES} stages")
        for stage in stages:
            if not isinstance(stage, Stage):
                raise TypeError(f"Then takes Stage values, got {type(stage).__name__}")
        self.stages = stages
        self.result = result

    def __repr__(self) -> str:
        return f"Then({', '.join(s.task for s in self.stages)}, result={self.result!r})"
