"""Chains: what runs after a job succeeds. `Stage` describes the next job; `Then` is what a pipeline
returns to choose its next stages at run time (docs/patterns.md "Chains and stages").

    app.enqueue("extract", {"day": "2026-11-01"}, then=[Stage("transform"), Stage("load", queue="db")])

    @pipeline("split")
    async def split(ctx):
        parts = await list_parts(ctx.args["file"])
        return Then(*(Stage("load_part", {"part": p}) for p in parts), result={"parts": len(parts)})

A stage is enqueued by the statement that finishes its parent as succeeded, so a crash can neither
lose nor double it. Every stage of a run carries the first job's id as `chain_id`.

What a chain may be is decided here, for every face: at most `MAX_STAGES` stages, each with args
PostgreSQL can store (`stages_json`), and what a stored `chain_next` must hold (`stored_stages`).
The rows a finish inserts are built from them in `workers/chaining.py`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, ValidationError, field_validator

from dataloader.base import StrictModel
from dataloader.model.storable import encode_json

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
    side by side: a fan-out). It replaces the stages planned at enqueue, if any.

    `join`: a stage that runs once after every one of `stages` has ended, however each ended
    (fan-in). It receives `{**join.args, "inputs": [...]}`: per stage, in this order, its `job_id`,
    `task`, `status` (succeeded, failed, canceled, lost, or deleted), `result` and `error`. The join
    waits for the stages themselves, not for the stages they enqueue in turn. Neither the stages
    nor the join may carry an `idempotency_key`: a stage the key made a no-op would never end."""

    __slots__ = ("join", "result", "stages")

    def __init__(self, *stages: Stage, result: Any = None, join: Stage | None = None) -> None:
        if not stages:
            raise ValueError("Then needs at least one Stage")
        if len(stages) > MAX_STAGES:
            raise ValueError(f"Then takes at most {MAX_STAGES} stages")
        for stage in stages:
            if not isinstance(stage, Stage):
                raise TypeError(f"Then takes Stage values, got {type(stage).__name__}")
        if join is not None:
            if not isinstance(join, Stage):
                raise TypeError(f"Then's join must be a Stage, got {type(join).__name__}")
            keyed = [s.task for s in (*stages, join) if s.idempotency_key is not None]
            if keyed:
                raise ValueError(f"a Then with a join takes no idempotency_key (stage {keyed[0]!r} has one): "
                                 "a stage the key made a no-op would never end, and the join never run")
        self.stages = stages
        self.result = result
        self.join = join

    def __repr__(self) -> str:
        join = "" if self.join is None else f", join={self.join.task}"
        return f"Then({', '.join(s.task for s in self.stages)}{join}, result={self.result!r})"


def stages_json(stages: Sequence[Stage], max_args_bytes: int) -> str | None:
    """Stages planned at enqueue as the `chain_next` column's JSON (None for none). Raises
    ValueError for a plan that could not be enqueued later (too many stages, unstorable args)."""
    if not stages:
        return None
    count = 0
    pending = list(stages)
    while pending:
        stage = pending.pop()
        count += 1
        if count > MAX_STAGES:
            raise ValueError(f"a chain plans at most {MAX_STAGES} stages")
        _, problem = encode_json(stage.args, max_args_bytes)
        if problem is not None:
            raise ValueError(f"stage {stage.task!r}: its args cannot be stored: {problem}")
        pending.extend(stage.then)
    return json.dumps([plan_of(s) for s in stages], ensure_ascii=False)


def plan_of(stage: Stage) -> dict[str, Any]:
    """One planned stage as stored in `chain_next` (defaults left out)."""
    return stage.model_dump(exclude_defaults=True, mode="json")


def stored_stages(planned: Any) -> list[Stage]:
    """A job's stored `chain_next` as stages; ValueError when it holds no valid plan."""
    if isinstance(planned, str):  # jsonb read without our codec
        planned = json.loads(planned)
    if not isinstance(planned, list) or not planned:
        raise ValueError("the job's chain_next is not a list of stages")
    try:
        return [Stage.model_validate(item) for item in planned]
    except ValidationError as exc:
        raise ValueError(f"the job's chain_next holds an invalid stage: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else error["msg"]
