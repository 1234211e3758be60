"""Flow control's values: a queue's flow state and limits as every layer sees it, and the
one validation of the limits that every face (Python, HTTP, CLI, `Queue(limits=...)`,
DL_QUEUES_JSON) goes through, so they all accept and refuse the same values with the same words."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any, TypedDict

from dataloader.exceptions import ValidationFailed
from dataloader.model.clock import iso

QUEUE_NAME_MAX = 200  # the job request's limit on `queue` (jobs/manager.py JobRequest)
TASK_NAME_MAX = 200  # and on `task`
PARTITION_KEY_MAX = 200  # and on `partition_key`

# Fair share (0024): a weight per partition key, in [WEIGHT_MIN, WEIGHT_MAX]; the claim reads any
# stored weight outside that range as 1 (claim_jobs_fair.sql, the same two numbers), so no
# hand-written value breaks it. The floor keeps the claim's arithmetic finite: a weight of 1e-320
# was accepted once, and every claim of its queue then failed ("value out of range": a tenant's
# rank divided by it overflows a float8).
WEIGHT_MIN = 0.001
WEIGHT_MAX = 1_000_000.0
WEIGHTS_MAX = 10_000  # partition keys with a weight of their own, per queue
# the settings that are not limits: how a queue's claims share it among its partition keys
FAIR_SETTINGS = ("fair_share", "fair_weights")

# The ranges of the limits (docs/flow-control.md "Limits"). A concurrency is a count of running
# jobs; a rate is a count of starts per period. A period shorter than 10 ms is below what a claim
# round trip can resolve; one longer than a day would keep a day of start records per queue.
CONCURRENCY_MAX = 1_000_000
RATE_LIMIT_MAX = 100_000
PERIOD_MIN_SEC = 0.01
PERIOD_MAX_SEC = 86_400.0
DEFAULT_PERIOD_SEC = 1.0  # a rate given without a period counts starts per second

# name -> (kind, min, max): the table every face's check reads (one set of rules).
LIMIT_RULES: dict[str, tuple[str, float, float]] = {
    "concurrency": ("count", 1, CONCURRENCY_MAX),
    "partition_concurrency": ("count", 1, CONCURRENCY_MAX),
    "rate_limit": ("count", 1, RATE_LIMIT_MAX),
    "rate_period_sec": ("period", PERIOD_MIN_SEC, PERIOD_MAX_SEC),
    "partition_rate_limit": ("count", 1, RATE_LIMIT_MAX),
    "partition_rate_period_sec": ("period", PERIOD_MIN_SEC, PERIOD_MAX_SEC),
}
# a rate's count and the period it is counted over
RATE_PAIRS = (("rate_limit", "rate_period_sec"), ("partition_rate_limit", "partition_rate_period_sec"))
# The limits a claim can hold a job back by (the label of dl_flow_held_back_total, the keys of `held_back`).
LIMIT_NAMES = ("concurrency", "partition_concurrency", "rate", "partition_rate")

_RATE = re.compile(r"^\s*(\d+)\s*(?:/\s*(\d*\.?\d*)\s*(ms|s|m|h|d)?)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _problem(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{name}: {message}", [{"loc": [name], "msg": message, "type": "value_error"}])


def parse_rate(text: object, name: str = "rate") -> tuple[int, float]:
    """(starts, period seconds) from a rate's text: "10/1s", "10/s", "5/500ms", "100/1m", "1000/1h"
    (a bare "10" is 10 per second). ValidationFailed naming `name` otherwise."""
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise _problem(name, 'must be a rate like "10/1s" (starts per period)')
    match = _RATE.match(str(text) if isinstance(text, int) else text)
    if match is None:
        raise _problem(name, 'must be a rate like "10/1s", "5/500ms" or "100/1m" (starts per period)')
    count_text, amount_text, unit = match.groups()
    if "/" in str(text) and not unit and not amount_text:
        raise _problem(name, 'must be a rate like "10/1s", "5/500ms" or "100/1m" (starts per period)')
    try:
        amount = float(amount_text) if amount_text else 1.0
    except ValueError:
        raise _problem(name, f"{amount_text!r} is not a number") from None
    limit_name, period_name = ("partition_rate_limit", "partition_rate_period_sec") if name.startswith(
        "partition") else ("rate_limit", "rate_period_sec")
    limit = check_limit(limit_name, int(count_text), label=name)
    period = check_limit(period_name, amount * _UNITS[unit or "s"], label=name)
    return int(limit), float(period)


def parse_limit_text(name: str, text: str) -> int | None:
    """A count limit as the CLI reads it: an integer, or "none" to clear. ValidationFailed otherwise."""
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise _problem(name, "must be an integer or none") from None
    return check_limit(name, value)  # type: ignore[return-value]


def parse_rate_text(name: str, text: str) -> tuple[int | None, float | None]:
    """A rate as the CLI reads it: "10/1s" (see parse_rate), or "none" to clear it."""
    return (None, None) if text.strip().lower() == "none" else parse_rate(text, name)


def format_rate(limit: int | None, period: float | None) -> str | None:
    """The text form of a rate ("10/1s"), or None when there is none."""
    if limit is None:
        return None
    period = DEFAULT_PERIOD_SEC if period is None else period
    return f"{limit}/{period:g}s"


def check_limit(name: str, value: object, label: str | None = None) -> int | float | None:
    """One limit's value, checked by LIMIT_RULES (None clears it). ValidationFailed naming `label`."""
    label = label or name
    if name not in LIMIT_RULES:
        raise _problem(name, f"unknown setting (allowed: {', '.join((*LIMIT_RULES, *FAIR_SETTINGS))})")
    if value is None:
        return None
    kind, low, high = LIMIT_RULES[name]
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _problem(label, "must be an integer or null")
        if not low <= value <= high:
            raise _problem(label, f"must be between {int(low)} and {int(high)}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _problem(label, "must be a number of seconds or null")
    if not low <= value <= high:
        raise _problem(label, f"must be between {low:g} and {high:g} seconds")
    return float(value)


def check_fair_share(value: object) -> bool:
    """fair_share: true or false (null reads as false: off)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _problem("fair_share", "must be true or false")
    return value


def check_fair_weights(weights: object) -> dict[str, float] | None:
    """fair_weights: {partition_key: weight}, or None (every key weighs 1); a key not named weighs 1."""
    if weights is None:
        return None
    if not isinstance(weights, Mapping):
        raise _problem("fair_weights", "must be an object of partition key -> weight")
    if len(weights) > WEIGHTS_MAX:
        raise _problem("fair_weights", f"must name at most {WEIGHTS_MAX} partition keys")
    checked: dict[str, float] = {}
    for key, weight in weights.items():
        if not isinstance(key, str) or len(key) > PARTITION_KEY_MAX or "\x00" in key:
            raise _problem("fair_weights", f"a partition key must be a string of at most {PARTITION_KEY_MAX} "
                                           "characters without NUL")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) \
                or not WEIGHT_MIN <= weight <= WEIGHT_MAX:
            raise _problem("fair_weights",
                           f"the weight of {key!r} must be a number in [{WEIGHT_MIN:g}, {WEIGHT_MAX:g}]")
        checked[key] = float(weight)
    return checked


def parse_fair_weights_text(text: str) -> dict[str, float] | None:
    """fair_weights as the CLI reads it: a JSON object, or "none" to clear (every key weighs 1)."""
    if text.strip().lower() == "none":
        return None
    try:
        value: Any = json.loads(text)
    except ValueError as exc:
        raise _problem("fair_weights", f"must be a JSON object of partition key -> weight ({exc})") from None
    return check_fair_weights(value)


def stored_weights(value: object) -> dict[str, float] | None:
    """fair_weights as stored: anything but an object (a hand-written row) reads as none, and a
    weight out of range as absent — as the claim reads them (every such key weighs 1)."""
    if not isinstance(value, dict):
        return None
    return {str(k): float(v) for k, v in value.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            and WEIGHT_MIN <= v <= WEIGHT_MAX}


def check_setting(name: str, value: object) -> Any:
    """One setting of a queue, checked: a limit (LIMIT_RULES) or a fair-share setting."""
    if name == "fair_share":
        return check_fair_share(value)
    if name == "fair_weights":
        return check_fair_weights(value)
    return check_limit(name, value)


class QueueSettingsChanges(TypedDict, total=False):
    """The keyword arguments of `configure_queue` (a partial update; None clears a limit)."""

    concurrency: int | None
    partition_concurrency: int | None
    rate_limit: int | None
    rate_period_sec: float | None
    partition_rate_limit: int | None
    partition_rate_period_sec: float | None
    fair_share: bool
    fair_weights: dict[str, float] | None


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's limits across every node (None: no limit). `concurrency`: jobs of the queue running
    at once; `partition_concurrency`: running at once per `partition_key`; `rate_limit` starts per
    `rate_period_sec`; `partition_rate_limit` starts per `partition_rate_period_sec` per partition
    key. Stored in dl_queue_flow (0022); enforced by the claim (docs/flow-control.md)."""

    concurrency: int | None = None
    partition_concurrency: int | None = None
    rate_limit: int | None = None
    rate_period_sec: float | None = None
    partition_rate_limit: int | None = None
    partition_rate_period_sec: float | None = None
    # claims go round-robin (or by weight) across the jobs' partition keys (0024); a key not named
    # in fair_weights weighs 1 (None: every key does)
    fair_share: bool = False
    fair_weights: dict[str, float] | None = None

    @property
    def limited(self) -> bool:
        return any(getattr(self, name) is not None for name in LIMIT_RULES)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def merged(self, changes: Mapping[str, Any]) -> QueueSettings:
        """These settings with `changes` (checked field values; None clears) applied, and each rate's
        period made whole: a rate with no period counts per DEFAULT_PERIOD_SEC, a cleared rate drops
        its period. ValidationFailed for a period given to a queue with no such rate."""
        result = replace(self, **changes)
        for limit_name, period_name in RATE_PAIRS:
            limit, period = getattr(result, limit_name), getattr(result, period_name)
            if limit is None and period is not None:
                if changes.get(period_name) is not None:
                    raise _problem(period_name, f"needs {limit_name} (a period of no rate)")
                result = replace(result, **{period_name: None})
            elif limit is not None and period is None:
                result = replace(result, **{period_name: DEFAULT_PERIOD_SEC})
        return result

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> QueueSettings:
        values = {name: row[name] for name in LIMIT_RULES}
        return cls(**values, fair_share=bool(row["fair_share"]), fair_weights=stored_weights(row["fair_weights"]))


def check_changes(changes: Mapping[str, object]) -> dict[str, Any]:
    """A partial update of a queue's settings, checked: at least one setting, every key a known
    setting, every value in range or None (clear). ValidationFailed listing every problem; nothing
    is written before this."""
    if not changes:
        raise ValidationFailed(f"nothing to change: name at least one of {', '.join((*LIMIT_RULES, *FAIR_SETTINGS))}")
    checked: dict[str, Any] = {}
    problems: list[dict[str, Any]] = []
    for name, value in changes.items():
        try:
            checked[name] = check_setting(str(name), value)
        except ValidationFailed as exc:
            problems.extend(exc.fields)
    if problems:
        raise ValidationFailed("; ".join(f"{p['loc'][0]}: {p['msg']}" for p in problems), problems)
    return checked


def changes_from_text(*, concurrency: str | None = None, partition_concurrency: str | None = None,
                      rate: str | None = None, partition_rate: str | None = None, fair_share: bool | None = None,
                      fair_weights: str | None = None) -> dict[str, Any]:
    """A partial update of a queue's settings from their text forms, as the CLI's options and the
    console's form give them (None: keep; "none": clear; rates as "10/1s"), checked by
    check_changes: one reading for both faces."""
    changes: dict[str, Any] = {}
    if concurrency is not None:
        changes["concurrency"] = parse_limit_text("concurrency", concurrency)
    if partition_concurrency is not None:
        changes["partition_concurrency"] = parse_limit_text("partition_concurrency", partition_concurrency)
    if rate is not None:
        changes["rate_limit"], changes["rate_period_sec"] = parse_rate_text("rate", rate)
    if partition_rate is not None:
        changes["partition_rate_limit"], changes["partition_rate_period_sec"] = parse_rate_text(
            "partition_rate", partition_rate)
    if fair_share is not None:
        changes["fair_share"] = fair_share
    if fair_weights is not None:
        changes["fair_weights"] = parse_fair_weights_text(fair_weights)
    return check_changes(changes)


def settings_from_declaration(declared: Mapping[str, object], where: str = "limits") -> QueueSettings:
    """The settings a queue declares in code (`Queue("load", limits={...})`) or in DL_QUEUES_JSON:
    the setting names, plus `rate` / `partition_rate` as text ("10/1s"). ValidationFailed otherwise."""
    if not isinstance(declared, Mapping):
        raise _problem(where, 'must be an object like {"concurrency": 5, "rate": "10/1s"}')
    changes: dict[str, object] = {}
    for key, value in declared.items():
        if key in ("rate", "partition_rate"):
            limit_name, period_name = ("rate_limit", "rate_period_sec") if key == "rate" else (
                "partition_rate_limit", "partition_rate_period_sec")
            if limit_name in declared or period_name in declared:
                raise _problem(key, f"give either {key} or {limit_name}/{period_name}, not both")
            if value is not None:
                changes[limit_name], changes[period_name] = parse_rate(value, key)
            continue
        changes[str(key)] = value
    return QueueSettings().merged(check_changes(changes))


def held_back(settings: QueueSettings, *, running: int, runnable: int, starts: int,
              partition_concurrency_held: int = 0, partition_rate_held: int = 0) -> dict[str, int]:
    """How many runnable jobs each limit holds back now, each limit on its own (a job two limits hold
    back counts under both): a queue limit holds back the runnable jobs beyond the slots (or the
    window's starts) it leaves; a partition limit, those beyond what each key's limit leaves (the
    database sums them per key). A limit that is not set holds back nothing."""
    def beyond(limit: int | None, used: int) -> int:
        return 0 if limit is None else max(0, runnable - max(0, limit - used))

    return {"concurrency": beyond(settings.concurrency, running),
            "partition_concurrency": partition_concurrency_held if settings.partition_concurrency else 0,
            "rate": beyond(settings.rate_limit, starts),
            "partition_rate": partition_rate_held if settings.partition_rate_limit else 0}


# Flow control per TASK of a queue (0027): a task's running jobs and starts per period, across every
# node. The same key names, ranges and validation as a queue's (LIMIT_RULES); the partition limits
# and fair share are the queue's alone.
TASK_LIMIT_SETTINGS = ("concurrency", "rate_limit", "rate_period_sec")
TASK_DECLARATION_KEYS = ("concurrency", "rate", "rate_limit", "rate_period_sec")
# The limits a claim can hold a job back by for its task (the `limit` label of dl_task_held_back_total).
TASK_LIMIT_NAMES = ("concurrency", "rate")


class TaskSettingsChanges(TypedDict, total=False):
    """The keyword arguments of `configure_task` (a partial update; None clears a limit)."""

    concurrency: int | None
    rate_limit: int | None
    rate_period_sec: float | None


def _not_task_limit(name: str, allowed: tuple[str, ...]) -> ValidationFailed:
    return _problem(name, f"not a task limit (allowed: {', '.join(allowed)}; partition limits and fair share "
                          "are a queue's)")


def check_task_changes(changes: Mapping[str, object]) -> dict[str, Any]:
    """A partial update of a task's limits, checked as a queue's (check_changes) after refusing the
    settings a task does not have. ValidationFailed listing every problem; nothing written before."""
    if not changes:
        raise ValidationFailed(f"nothing to change: name at least one of {', '.join(TASK_LIMIT_SETTINGS)}")
    problems = [_not_task_limit(str(name), TASK_LIMIT_SETTINGS).fields[0]
                for name in changes if name not in TASK_LIMIT_SETTINGS]
    if problems:
        raise ValidationFailed("; ".join(f"{p['loc'][0]}: {p['msg']}" for p in problems), problems)
    return check_changes(changes)


def task_changes_from_text(*, concurrency: str | None = None, rate: str | None = None,
                           **queue_only: object) -> dict[str, Any]:
    """A partial update of a task's limits from their text forms, as the CLI's `queues set --task`
    and the console's limits form with a task give them: changes_from_text's one reading. A queue's
    option given for a task (`partition_concurrency=...`, `fair_share=...`; None: not given) is
    refused as check_task_changes refuses it."""
    refused = {name: value for name, value in queue_only.items() if value is not None}
    if refused:
        check_task_changes(refused)
    return check_task_changes(changes_from_text(concurrency=concurrency, rate=rate) if (
        concurrency is not None or rate is not None) else {})


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """A task's limits within its queue, across every node (None: no limit): `concurrency` jobs of
    the task running at once, `rate_limit` starts per `rate_period_sec`. Stored in dl_task_flow
    (0027); enforced by the limited claim's gate (docs/flow-control.md "Limits per task")."""

    concurrency: int | None = None
    rate_limit: int | None = None
    rate_period_sec: float | None = None

    @property
    def limited(self) -> bool:
        return self.concurrency is not None or self.rate_limit is not None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def merged(self, changes: Mapping[str, Any]) -> TaskSettings:
        """QueueSettings.merged's rules (a rate's period made whole, a period of no rate refused)."""
        merged = QueueSettings(**self.to_dict()).merged(changes)
        return TaskSettings(merged.concurrency, merged.rate_limit, merged.rate_period_sec)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TaskSettings:
        return cls(row["concurrency"], row["rate_limit"], row["rate_period_sec"])


def task_settings_from_declaration(declared: object, where: str = "limits") -> TaskSettings:
    """The limits a task declares in code (`@pipeline("x", limits={"concurrency": 3, "rate": "10/s"})`):
    settings_from_declaration's reading, for a task's keys only. ValidationFailed otherwise."""
    if not isinstance(declared, Mapping):
        raise _problem(where, 'must be an object like {"concurrency": 3, "rate": "10/1s"}')
    problems = [_not_task_limit(str(key), TASK_DECLARATION_KEYS).fields[0]
                for key in declared if key not in TASK_DECLARATION_KEYS]
    if problems:
        raise ValidationFailed("; ".join(f"{p['loc'][0]}: {p['msg']}" for p in problems), problems)
    settings = settings_from_declaration(declared, where)
    return TaskSettings(settings.concurrency, settings.rate_limit, settings.rate_period_sec)


@dataclass(frozen=True, slots=True)
class TaskFlow:
    """One task of a queue with limits: the limits, who set them ("runtime" wins over "declared"),
    and their use now on all nodes: running jobs of the task, starts in its rate's window, and the
    runnable jobs each limit holds back."""

    task: str
    settings: TaskSettings = field(default_factory=TaskSettings)
    settings_source: str | None = None
    running: int = 0
    runnable: int = 0
    starts: int = 0

    @property
    def held_back(self) -> dict[str, int]:
        def beyond(limit: int | None, used: int) -> int:
            return 0 if limit is None else max(0, self.runnable - max(0, limit - used))

        return {"concurrency": beyond(self.settings.concurrency, self.running),
                "rate": beyond(self.settings.rate_limit, self.starts)}

    def to_dict(self) -> dict[str, Any]:
        return {**self.settings.to_dict(), "settings_source": self.settings_source, "running": self.running,
                "runnable": self.runnable, "starts": self.starts, "held_back": self.held_back}


@dataclass(frozen=True, slots=True)
class QueueFlow:
    """One queue: paused or not, since when, its limits (and whether they were set at run time or
    declared), and its current use on all nodes: running and queued jobs, and how many runnable jobs
    each limit holds back now. A queue with no flow state and no live job is not listed anywhere."""

    queue: str
    paused: bool
    paused_at: datetime | None = None
    running: int = 0
    queued: int = 0
    settings: QueueSettings = field(default_factory=QueueSettings)
    # "runtime" (configure_queue, HTTP PATCH, CLI `queues set`: wins over declarations), "declared"
    # (Queue(limits=...) / DL_QUEUES_JSON at a node's start) or None (never set)
    settings_source: str | None = None
    held_back: dict[str, int] = field(default_factory=dict)
    # the queue's paused tasks (0025) and since when: nothing of them starts, its other tasks run
    paused_tasks: dict[str, datetime] = field(default_factory=dict)
    # the autoscaling signal (flow/scaling.py): job slots the queue wants on all nodes (None: not read)
    desired_workers: int | None = None
    # the queue's tasks with limits of their own (0027), by task
    task_limits: dict[str, TaskFlow] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "paused": self.paused,
                "paused_at": iso(self.paused_at) if self.paused_at is not None else None,
                "running": self.running, "queued": self.queued, **self.settings.to_dict(),
                "settings_source": self.settings_source,
                "held_back": {name: self.held_back.get(name, 0) for name in LIMIT_NAMES},
                "paused_tasks": {task: iso(at) for task, at in self.paused_tasks.items()},
                "desired_workers": self.desired_workers,
                "tasks": {task: t.to_dict() for task, t in self.task_limits.items()}}


@dataclass(frozen=True, slots=True)
class QueueScaling:
    """The autoscaling signal of a queue (flow/scaling.py): the job slots it wants on all nodes
    (`desired_workers`), the rule that decided, and the inputs it was computed from."""

    queue: str
    desired_workers: int
    reason: str
    runnable: int = 0  # queued jobs that could start now (due, not parked)
    running: int = 0
    oldest_age_sec: float = 0.0  # how long the oldest runnable job has been waiting
    throughput_per_sec: float = 0.0  # jobs finished per second over the recent window
    paused: bool = False
    concurrency: int | None = None  # the queue's global concurrency limit, the cap
    target_sec: float = 60.0

    def to_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "desired_workers": self.desired_workers, "reason": self.reason,
                "runnable": self.runnable, "running": self.running,
                "oldest_age_sec": round(self.oldest_age_sec, 3),
                "throughput_per_sec": round(self.throughput_per_sec, 3), "paused": self.paused,
                "concurrency": self.concurrency, "target_sec": self.target_sec}
