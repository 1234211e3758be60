"""Held jobs (dead letter): which failures a queue keeps for an operator instead of
leaving them plain `failed`. A held job is a `failed` row with `held_at` set (migration 0014 says
why not a new status): listable (`held: true` in the search filter), released by a requeue (bulk or
`retry`), discarded by a delete. The finish statement decides, in the statement that fails the
job and journals it, from this rule:

- `exhausted`: the queue holds jobs whose attempts ran out (DL_HOLD_QUEUES names it, or is "*");
- `errors`: error-text prefixes (DL_HOLD_ERRORS_JSON) held at once, without the retries left, in
  any queue — the errors no retry can fix ("SchemaMismatch", "ValidationError: ").

A pipeline's FatalError is not "exhausted": it is held only when its text names a held error.
A leaf module: the worker and the settings both use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class HoldSettings(Protocol):
    """What a rule reads of `dataloader.config.Settings` (a protocol: config imports the model, not
    the other way round)."""

    hold_queues: str
    hold_errors_json: Sequence[str]


@dataclass(frozen=True, slots=True)
class HoldRule:
    exhausted: bool = False
    errors: tuple[str, ...] = ()

    @classmethod
    def for_queue(cls, settings: HoldSettings, queue: str) -> HoldRule:
        queues = {q.strip() for q in settings.hold_queues.split(",") if q.strip()}
        return cls(exhausted="*" in queues or queue in queues, errors=tuple(settings.hold_errors_json))
