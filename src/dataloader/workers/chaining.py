"""The rows a succeeded job enqueues next (chains and fan-out, docs/patterns.md "Chains and
stages"), built and checked before the finish statement runs.

The finish statement (`finish_jobs.sql`, or `finish_in_transaction.sql` for `ctx.transaction()`)
inserts these rows in the statement that ends the parent as succeeded. A row it could not store
would fail the whole batch of finishes, so every value is checked here first: a stage that cannot
be enqueued (its args too large, a hand-edited `chain_next` that is not a list of stages) makes the
attempt fail with a clear error instead. What a chain may be is the model's rule (`model/chain.py`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from dataloader.model import payload_crypto
from dataloader.model.chain import Stage, Then, plan_of, stored_stages
from dataloader.model.storable import encode_json

DEFAULT_MAX_ATTEMPTS = 5
# How far ahead a join stage is held while its members run: never reached, the last member's end
# makes it due (a century, so no clock or delay arithmetic can make it due early).
JOIN_HOLD_SEC = 100 * 365.25 * 86400


def plan_next_jobs(
    *,
    queue: str,
    lease_ttl_sec: int,
    planned: Any,
    then: Then | None,
    result: Any,
    max_args_bytes: int,
    pipeline_max_attempts: Callable[[str], int | None] = lambda task: None,
) -> str | None:
    """The next jobs as the JSON array the finish statement reads, or None for none.

    `planned`: the parent's `chain_next` (stages planned at enqueue; the first runs next with the
    parent's result as `args["input"]`, the rest ride along). `then`: what the pipeline returned,
    which replaces the plan. Raises ValueError naming the stage that cannot be enqueued."""
    rows: list[dict[str, Any]] = []
    if then is not None:
        for stage in then.stages:
            rows.append(_row(stage, stage.args, stage.then, queue, lease_ttl_sec, max_args_bytes,
                             pipeline_max_attempts))
        if then.join is not None:
            join = _row(then.join, then.join.args, then.join.then, queue, lease_ttl_sec, max_args_bytes,
                        pipeline_max_attempts)
            # held until its last member ends (0032's trigger makes it due, after its own delay)
            join["join_delay_sec"] = join["delay_sec"]
            join["delay_sec"] = JOIN_HOLD_SEC
            join["join_members"] = [row["job_id"] for row in rows]
            rows.append(join)
    elif planned:
        stages = stored_stages(planned)
        first, rest = stages[0], stages[1:]
        args = first.args if result is None else {**first.args, "input": result}
        rows.append(_row(first, args, [*first.then, *rest], queue, lease_ttl_sec, max_args_bytes,
                         pipeline_max_attempts))
    return json.dumps(rows, ensure_ascii=False) if rows else None


def _row(stage: Stage, args: dict[str, Any], then: Sequence[Stage], queue: str, lease_ttl_sec: int,
         max_args_bytes: int, pipeline_max_attempts: Callable[[str], int | None]) -> dict[str, Any]:
    encoded, problem = encode_json(args, max_args_bytes)
    if problem is not None:
        raise ValueError(f"stage {stage.task!r}: its args cannot be stored: {problem}")
    job_id = str(uuid.uuid4())
    return {
        "job_id": job_id,
        "queue": stage.queue or queue,
        "task": stage.task,
        # encrypted at rest like any enqueue's args (off: the text as it is)
        "args": json.loads(payload_crypto.seal_args(stage.task, encoded)) if encoded is not None else {},
        "idempotency_key": stage.idempotency_key,
        "lock_key": stage.lock_key or job_id,
        "partition_key": "",
        "priority": stage.priority,
        "delay_sec": stage.delay_sec,
        "max_attempts": pipeline_max_attempts(stage.task) or stage.max_attempts or DEFAULT_MAX_ATTEMPTS,
        "lease_ttl_sec": stage.lease_ttl_sec or lease_ttl_sec,
        "timeout_sec": stage.timeout_sec,
        "chain_next": [plan_of(s) for s in then] or None,
    }
