"""Fair share's input rules (issue 21 part B; docs/flow-control.md "Fair share"): whether a queue's
claims go round-robin across its jobs' partition keys, and each key's weight.

The choice is enforced by the claim statements (claim_jobs_fair.sql for a fair queue, claim_jobs.sql
otherwise, each gating on dl_queue_flow.fair_share), so it holds on every node from the commit of
the change on: a worker whose claim finds nothing asks which claim the queue wants
(next_due_in.sql) and switches. This module only checks what an operator asks for, the same for
every face: a weight is a finite number in (0, 1_000_000] named by a partition key (a job's
`partition_key`, at most 200 characters); a key not named weighs 1."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from dataloader.exceptions import ValidationFailed

WEIGHT_MAX = 1_000_000.0  # the claim reads any weight outside (0, WEIGHT_MAX] as 1 (claim_jobs_fair.sql)
PARTITION_KEY_MAX = 200
WEIGHTS_MAX = 10_000  # keys with a weight of their own, per queue


def _refuse(field: str, problem: str) -> ValidationFailed:
    return ValidationFailed(f"{field}: {problem}", [{"loc": [field], "msg": problem, "type": "value_error"}])


def check_fair_share(value: object) -> bool:
    if not isinstance(value, bool):
        raise _refuse("fair_share", "must be true or false")
    return value


def check_fair_weights(weights: object) -> dict[str, float] | None:
    """{partition_key: weight}, or None (every key weighs 1); ValidationFailed for anything else."""
    if weights is None:
        return None
    if not isinstance(weights, Mapping):
        raise _refuse("fair_weights", "must be an object of partition key -> weight")
    if len(weights) > WEIGHTS_MAX:
        raise _refuse("fair_weights", f"must name at most {WEIGHTS_MAX} partition keys")
    checked: dict[str, float] = {}
    for key, weight in weights.items():
        if not isinstance(key, str) or len(key) > PARTITION_KEY_MAX or "\x00" in key:
            raise _refuse("fair_weights", f"a partition key must be a string of at most {PARTITION_KEY_MAX} "
                                          "characters without NUL")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) \
                or not 0 < weight <= WEIGHT_MAX:
            raise _refuse("fair_weights", f"the weight of {key!r} must be a number in (0, {WEIGHT_MAX:g}]")
        checked[key] = float(weight)
    return checked


def parse_fair_weights(text: str) -> dict[str, float] | None:
    """The CLI's and the settings' form: a JSON object (or `null`), checked like any other face's."""
    try:
        value: Any = json.loads(text)
    except ValueError as exc:
        raise _refuse("fair_weights", f"must be a JSON object: {exc}") from None
    return check_fair_weights(value)
