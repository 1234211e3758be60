"""Settings: built in code (`Settings(workers=[Queue("load", concurrency=4)])`) or read from the
environment (003 §8 names plus our additions), validated the same way either way.

Every problem is reported as a `ConfigError` naming the variable, so the CLI can exit with one
clear line instead of a traceback.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from dataloader.exceptions import ConfigError
from dataloader.model.flow import QueueSettings, TaskSettings, settings_from_declaration, task_settings_from_declaration
from dataloader.model.job import FINISHED_STATUS_NAMES
from dataloader.model.principal import Role

DEFAULT_WORKERS_JSON = '[{"queue":"default","concurrency":4}]'


class Queue(BaseModel):
    """A queue this process works on, and how many of its jobs run at once here (one entry of
    WORKERS_JSON). `limits` declares the queue's limits across every node
    (docs/flow-control.md): `Queue("load", 4, limits={"concurrency": 10, "rate": "50/1s"})` — the keys
    of DL_QUEUES_JSON, applied at the node's start unless the queue's limits were set at run time."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    queue: str = Field(min_length=1, max_length=200)
    concurrency: int = Field(default=4, ge=1, le=1000)
    limits: QueueSettings | None = None

    @field_validator("limits", mode="before")
    @classmethod
    def _parse_limits(cls, value: Any) -> Any:
        if value is None or isinstance(value, QueueSettings):
            return value
        return settings_from_declaration(value)

    def __init__(self, queue: str | None = None, concurrency: int | None = None, **data: Any) -> None:
        # Positional form for code: Queue("load", 4); keyword and JSON forms work as for any model.
        if queue is not None:
            data["queue"] = queue
        if concurrency is not None:
            data["concurrency"] = concurrency
        super().__init__(**data)


WorkerConfig = Queue  # the name used before Queue


DEFAULT_SHARD = "default"
_SHARD_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


class Shard(BaseModel):
    """A PostgreSQL database that holds some queues (docs/scaling.md "Past one primary"): a whole
    dataloader database with its own migrations, leader, reaper and duties. One entry of
    DL_SHARDS_JSON; the default shard is DL_DB_DSN (and DL_DB_DIRECT_DSN) and holds every queue
    no shard names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dsn: str
    direct_dsn: str | None = None
    queues: tuple[str, ...] = ()


def _check_dsn_scheme(value: str) -> str:
    scheme = value.split("://", 1)[0].split("+", 1)[0] if "://" in value else ""
    if scheme not in ("postgresql", "postgres"):
        raise ValueError(f"must be a postgresql:// URL, got scheme {scheme or 'none'!r}")
    return value


def parse_shards(value: Any) -> dict[str, Shard]:
    """DL_SHARDS_JSON (JSON text or a mapping) as {name: Shard}; ValueError with one line naming
    the shard or queue at fault. A queue on two shards, a process queue, a reserved or malformed
    name, a DSN that is not postgresql:// or that two shards share are refused."""
    shards: dict[str, Shard] = _json_object(
        value, 'must be a JSON object like {"b": {"dsn": "postgresql://…/b", "queues": ["load"]}}', "shard",
        _shard, name_ok=None)
    owner: dict[str, str] = {}
    dsns: dict[str, str] = {}
    for name, shard in shards.items():
        for queue in shard.queues:
            if queue in owner:
                raise ValueError(f"queue {queue!r} is on two shards ({owner[queue]!r} and {name!r})")
            owner[queue] = name
    for name, shard in shards.items():
        if shard.dsn in dsns:
            raise ValueError(f"shard {name!r}: the same dsn as shard {dsns[shard.dsn]!r} (one database is one shard)")
        dsns[shard.dsn] = name
    return shards


def _shard(name: Any, spec: Any) -> Shard:
    """One shard of DL_SHARDS_JSON, on its own (parse_shards checks them against each other)."""
    if not isinstance(name, str) or not _SHARD_NAME.match(name):
        raise ValueError("a shard name is 1 to 63 of a-z, 0-9, _ and -, starting with a letter or digit")
    if name == DEFAULT_SHARD:
        raise ValueError("the name of DL_DB_DSN's shard, which holds every queue no shard names; give this "
                         "shard another name")
    if isinstance(spec, Shard):
        spec = spec.model_dump()
    if not isinstance(spec, dict) or "dsn" not in spec:
        raise ValueError("must be an object with dsn (and optional direct_dsn, queues)")
    unknown = sorted(set(spec) - {"dsn", "direct_dsn", "queues"})
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (allowed: dsn, direct_dsn, queues)")
    for key in ("dsn", "direct_dsn"):
        dsn = spec.get(key)
        if key == "direct_dsn" and dsn is None:
            continue
        if not isinstance(dsn, str) or not dsn:
            raise ValueError(f"{key} must be a postgresql:// URL")
        try:
            _check_dsn_scheme(dsn)
        except ValueError as exc:
            raise ValueError(f"{key} {exc}") from None
    queues = spec.get("queues", [])
    if not isinstance(queues, list | tuple):
        raise ValueError("queues must be a JSON list of queue names")
    for queue in queues:
        if not _is_queue_name(queue):
            raise ValueError(f"{queue!r} is not a queue name (1 to 200 characters, not blank)")
        if queue.startswith("process:"):
            raise ValueError(f"queue {queue!r} is a process queue; processes live on the default shard (DL_DB_DSN)")
    return Shard(dsn=spec["dsn"], direct_dsn=spec.get("direct_dsn"), queues=tuple(queues))


def _shards_beside(shards: dict[str, Shard], default_dsn: str | None) -> dict[str, Shard]:
    for name, shard in shards.items():
        if default_dsn and shard.dsn == default_dsn:
            raise ValueError(f"shard {name!r}: the same dsn as DL_DB_DSN, the default shard (one database "
                             "is one shard)")
    return shards


def validated_shards(value: Any, default_dsn: str | None) -> dict[str, Shard]:
    """`App(shards=...)`: DL_SHARDS_JSON's rules, a ConfigError naming it."""
    try:
        return _shards_beside(parse_shards(value), default_dsn)
    except ValueError as exc:
        raise ConfigError("DL_SHARDS_JSON", str(exc)) from None


def _is_queue_name(queue: object) -> bool:
    """A queue named in a JSON setting (DL_SHARDS_JSON, DL_QUEUES_JSON, DL_TASK_LIMITS_JSON): the
    job request's rule for `queue` (1 to 200 characters, not blank, no NUL)."""
    return isinstance(queue, str) and 1 <= len(queue) <= 200 and bool(queue.strip()) and "\x00" not in queue


def _json_text(value: Any, empty: str) -> Any:
    """A setting given as JSON text (an env var), parsed; other values pass through. One error
    message for every JSON setting."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value or empty)
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not valid JSON ({exc.msg} at char {exc.pos})") from None


def _json_object(value: Any, not_object: str, kind: str, entry: Callable[[str, Any], Any],
                 name_ok: Callable[[object], bool] | None = _is_queue_name, text: bool = True) -> dict[str, Any]:
    """A setting that is a JSON object of `kind` (queue, task, shard) -> its declaration, parsed
    with `entry(name, declaration)`: `not_object` when it is no object, and every problem as one
    line that names the entry (`queue 'load': ...`). One shape for every such setting; `text`: the
    value may be JSON text (a setting itself, not an object inside one)."""
    if text:
        value = _json_text(value, "{}")
    if not isinstance(value, dict):
        raise ValueError(not_object)
    parsed: dict[str, Any] = {}
    for name, declared in value.items():
        if name_ok is not None and not name_ok(name):
            raise ValueError(f"{kind} {name!r}: not a {kind} name (1 to 200 characters, not blank)")
        try:
            parsed[name] = entry(name, declared)
        except ValueError as exc:
            raise ValueError(f"{kind} {name!r}: {exc}") from None
    return parsed


def _queue_time_limit(queue: str, spec: Any) -> dict[str, Any]:
    """One queue of DL_QUEUE_TIME_LIMITS_JSON."""
    if not isinstance(spec, dict) or "limit" not in spec or set(spec) - {"limit", "fail"}:
        raise ValueError("must be an object with limit (and optional fail)")
    seconds = Settings.duration_seconds(spec["limit"])
    if not 0 <= seconds <= 3650 * 86400:
        raise ValueError("limit must be between 0 and 3650d")
    if not isinstance(spec.get("fail", False), bool):
        raise ValueError("fail must be true or false")
    return {"limit": seconds, "fail": spec.get("fail", False)}


def _task_limits(queue: str, tasks: Any) -> dict[str, TaskSettings]:
    """One queue of DL_TASK_LIMITS_JSON: task -> limits (a task name follows a queue name's rule)."""
    return _json_object(tasks, "must be an object of task -> limits", "task",
                        lambda task, declared: declared if isinstance(declared, TaskSettings)
                        else task_settings_from_declaration(declared, task), text=False)


def _retention_ages(queue: str, ages: Any) -> dict[str, float]:
    """One queue of DL_RETENTION_QUEUES_JSON: finished status -> age in seconds."""
    if not isinstance(ages, dict) or not ages:
        raise ValueError('must be an object of status: age, e.g. {"succeeded": "1d"}')
    parsed: dict[str, float] = {}
    for status, age in ages.items():
        if status not in FINISHED_STATUS_NAMES:
            raise ValueError(f"unknown status {status!r} (allowed: {', '.join(FINISHED_STATUS_NAMES)})")
        seconds = Settings.duration_seconds(age)
        if not 3600 <= seconds <= 3650 * 86400:
            raise ValueError(f"{status} age must be between 1h and 3650d")
        parsed[status] = seconds
    return parsed


def _queue_settings(queue: str, declared: Any) -> QueueSettings:
    """One queue of DL_QUEUES_JSON: its limits (a QueueSettings given in code passes as it is)."""
    return declared if isinstance(declared, QueueSettings) else settings_from_declaration(declared, queue)


# The settings that are a JSON object of queue -> declaration: the example their error shows, the
# parser of one queue's declaration, and the rule its queue names must follow (None: none checked).
# One validator reads them all (Settings._parse_queue_object).
_QUEUE_OBJECTS: dict[str, tuple[str, Callable[[str, Any], Any], Callable[[object], bool] | None]] = {
    "queue_time_limits_json": ('{"load": {"limit": "15m", "fail": false}}', _queue_time_limit, None),
    "queues_json": ('{"load": {"concurrency": 5, "rate": "10/1s"}}', _queue_settings, _is_queue_name),
    "task_limits_json": ('{"load": {"load.cbr": {"concurrency": 3, "rate": "10/1s"}}}', _task_limits,
                         _is_queue_name),
    "retention_queues_json": ('{"load": {"succeeded": "1d"}}', _retention_ages, None),
}


def default_data_dir() -> Path:
    """The embedded server's data directory: the user's data directory, or for root a system one
    (the server then runs as DL_EMBEDDED_USER, who cannot enter root's home)."""
    if os.geteuid() == 0:
        return Path("/var/lib/dataloader/pgdata")
    return Path(platformdirs.user_data_dir("dataloader")) / "pgdata"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DL_", extra="ignore", populate_by_name=True)

    db_dsn: str | None = None
    # A direct connection (no pooler, or a session-pooling one) for everything that needs a
    # session: each queue worker's control connection (its lock_keys' advisory locks), LISTEN, the
    # leader election, the migration lock. With it set and different, DL_DB_DSN may be a
    # transaction-pooling PgBouncer (docs/scaling.md "PgBouncer"). Unset: DL_DB_DSN is used for both.
    db_direct_dsn: str | None = None
    # More databases, each holding some queues (docs/scaling.md "Past one primary"):
    # {"b": {"dsn": "postgresql://…/b", "direct_dsn": optional, "queues": ["payments"]}}. A queue no
    # shard names lives on the default shard, DL_DB_DSN. Empty: one database, nothing changes.
    shards_json: Annotated[dict[str, Shard], NoDecode] = Field(default_factory=dict)
    # From the environment: WORKERS_JSON (a JSON list); in code: workers=[Queue(...)] or the JSON
    # text as workers_json=. NoDecode: our parser gives the one-line errors, not pydantic-settings'.
    workers: Annotated[list[Queue], NoDecode] = Field(
        default_factory=lambda: parse_workers_json(DEFAULT_WORKERS_JSON),
        validation_alias=AliasChoices("workers", "workers_json", "WORKERS_JSON"),
    )
    heartbeat_sec: float = Field(default=10, gt=0, le=3600)
    default_lease_ttl_sec: int = Field(default=60, gt=0, le=7 * 24 * 3600)
    reaper_period_sec: float = Field(default=10, gt=0, le=3600)
    claim_backoff_sec: float = Field(default=15, ge=0, le=24 * 3600)
    # Jobs a queue worker may hold claimed beyond its concurrency while its jobs run shorter than a
    # claim takes (workers/claim_ahead.py, docs/architecture.md "Claiming ahead"); 0: never.
    claim_ahead: int = Field(default=64, ge=0, le=1000)

    # Additions (not in 003): documented in README.
    data_dir: Path = Field(default_factory=lambda: default_data_dir())
    # As root, the embedded server runs as this OS user (PostgreSQL refuses root); created when missing.
    embedded_user: str = Field(default="dataloader", pattern=r"^[a-z_][a-z0-9_-]{0,31}$")
    shutdown_timeout_sec: float = Field(default=30, ge=0, le=24 * 3600)
    # After a run-time limit: how long a generator gets to reach its next yield (and a sync
    # pipeline to return) before it is cancelled or abandoned in its thread.
    timeout_grace_sec: float = Field(default=5, ge=0, le=3600)
    poll_fallback_sec: float = Field(default=10, gt=0, le=3600)
    pipeline_modules: str = ""
    db_pool_extra: int = Field(default=4, ge=1)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    api_token: str | None = None
    # The operator's console at /ui (docs/console.md): served by `dataloader serve` unless off;
    # read-only shows every page and refuses every action. The live poll is one per node, shared
    # by every open browser: its period bounds how stale a live page may be.
    ui_enabled: bool = True
    ui_read_only: bool = False
    ui_live_poll_sec: float = Field(default=1.0, ge=0.1, le=60)
    # A console sign-in lasts this long (seconds or 90m, 12h, 7d), then the login page asks again;
    # "Sign out" ends it at once on every node (ui/auth.py, migration 0028).
    ui_session_ttl: float = Field(default=12 * 3600, ge=60, le=30 * 86400)
    # Wrong tokens from one client address (the console's login, the API's bearer): past this many
    # within the window, that address gets 429 with Retry-After until the oldest failure leaves the
    # window (auth_throttle.py; per node). 0: no throttle.
    auth_max_failures: int = Field(default=10, ge=0, le=100_000)
    auth_failure_window_sec: float = Field(default=60, gt=0, le=86400)
    # The cost of a console user's password hash (argon2id, docs/security.md): argon2-cffi's
    # defaults (RFC 9106's second recommendation). Lower them only where sign-in speed beats
    # resistance to guessing (tests); a stored hash is re-made at its next sign-in when it is weaker.
    password_hash_time_cost: int = Field(default=3, ge=1, le=20)
    password_hash_memory_kib: int = Field(default=64 * 1024, ge=64, le=4 * 1024 * 1024)
    # Single sign-on to the console with OpenID Connect (docs/security.md "Single sign-on"): the
    # provider's issuer URL (its /.well-known/openid-configuration), this client's id and secret.
    # A claim names the user (lower-cased: a user name), another gives roles through
    # DL_OIDC_ROLES_JSON ({"claim value": "viewer|operator|admin"}, the highest one matched wins);
    # DL_OIDC_DEFAULT_ROLE for a person none matches (unset: refused).
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    oidc_scopes: str = "openid email profile"
    oidc_name_claim: str = "email"
    oidc_role_claim: str = "groups"
    oidc_roles_json: Annotated[dict[str, Role], NoDecode] = Field(default_factory=dict)
    oidc_default_role: Role | None = None
    log_level: str = "INFO"
    log_format: str = "auto"
    # Payloads encrypted at rest (docs/security.md "Encryption at rest"): `kid:base64key,...` (the
    # first encrypts, all decrypt) or `@/path/to/file` holding that list; unset: off, nothing
    # changes. The clear fields: `field` (every task) or `task:field`, kept beside the envelope
    # so the args search still finds them.
    encryption_keys: SecretStr | None = None
    encryption_clear_fields: str = ""
    max_args_bytes: int = Field(default=256 * 1024, gt=0)
    node_name: str = Field(default_factory=lambda: f"{os.uname().nodename}:{os.getpid()}")

    @field_validator("db_dsn", "db_direct_dsn")
    @classmethod
    def _check_dsn(cls, value: str | None) -> str | None:
        # The scheme is checked here, not at connect time, so `DL_DB_DSN=mysql://…` is a one-line
        # configuration error before anything starts. The accepted forms are storage/db.py's
        # asyncpg_dsn (postgresql://, postgres://, postgresql+asyncpg://).
        if not value:
            return None
        return _check_dsn_scheme(value)

    @field_validator("archive_url")
    @classmethod
    def _check_archive_url(cls, value: str | None) -> str | None:
        # Checked when the settings load (fsspec knows the protocol, its library is installed), so
        # a typo is a one-line configuration error at start, not a pruner failing every minute.
        from dataloader.model.archive_url import check_archive_url

        return check_archive_url(value)
    @field_validator("oidc_roles_json", mode="before")
    @classmethod
    def _parse_oidc_roles(cls, value: Any) -> Any:
        parsed = _json_text(value, "{}")
        if not isinstance(parsed, dict):
            raise ValueError('must be a JSON object: {"claim value": "viewer|operator|admin"}')
        return parsed

    @field_validator("shards_json", mode="before")
    @classmethod
    def _parse_shards(cls, value: Any, info: ValidationInfo) -> Any:
        return _shards_beside(parse_shards(value), info.data.get("db_dsn"))

    def shard_of(self, queue: str) -> str:
        """The shard that holds `queue`: the one DL_SHARDS_JSON names it in, else the default."""
        for name, shard in self.shards_json.items():
            if queue in shard.queues:
                return name
        return DEFAULT_SHARD

    def shard_names(self) -> list[str]:
        """Every shard, the default first."""
        return [DEFAULT_SHARD, *self.shards_json]

    @field_validator("log_format")
    @classmethod
    def _check_log_format(cls, value: str) -> str:
        if value not in ("auto", "json", "console"):
            raise ValueError("must be one of auto, json, console")
        return value

    @field_validator("log_level")
    @classmethod
    def _check_log_level(cls, value: str) -> str:
        value = value.upper()
        if value not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return value

    @field_validator("workers", mode="before")
    @classmethod
    def _parse_workers(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_workers_json(value)
        if isinstance(value, list | tuple):
            return check_workers([item if isinstance(item, Queue) else _queue_from(index, item)
                                  for index, item in enumerate(value)])
        return value

    @cached_property
    def pipeline_module_names(self) -> list[str]:
        return [name.strip() for name in self.pipeline_modules.split(",") if name.strip()]

    # --- Maintenance services (dataloader.maintenance, docs/maintenance.md) -------------
    # How often a follower asks for the leader lock, and how often the leader probes its session:
    # the fail-over after a leader dies is bounded by this (plus jitter and a round trip).
    leader_retry_sec: float = Field(default=5, ge=0.05, le=300)
    # A leader whose probe gets no answer in this time steps down (a half-open connection).
    leader_probe_timeout_sec: float = Field(default=5, ge=0.05, le=300)
    # A crashed service is restarted after base × 2^(n-1) seconds (n-th crash in a row), at most max.
    service_restart_backoff_sec: float = Field(default=1, gt=0, le=3600)
    service_restart_backoff_max_sec: float = Field(default=60, gt=0, le=24 * 3600)

    # --- Retention and stats (docs/patterns.md "Retention" and "Stats") ----------------
    # The pruner (leader only) deletes finished jobs, with their journal rows, older than an age
    # per status; ages are seconds or a duration ("90m", "12h", "7d"), between 1 hour and 10 years.
    retention_enabled: bool = True
    retention_period_sec: float = Field(default=60, gt=0, le=24 * 3600)
    retention_batch_size: int = Field(default=1000, ge=1, le=100_000)
    retention_succeeded: float = Field(default=7 * 86400, ge=3600, le=3650 * 86400)
    retention_canceled: float = Field(default=7 * 86400, ge=3600, le=3650 * 86400)
    retention_failed: float = Field(default=30 * 86400, ge=3600, le=3650 * 86400)
    retention_lost: float = Field(default=30 * 86400, ge=3600, le=3650 * 86400)
    # The processes' event feed (dl_process_feed): rows older than this are pruned too. A follower
    # further behind than this misses them (the events stay in each process's history).
    retention_process_feed: float = Field(default=30 * 86400, ge=3600, le=3650 * 86400)
    # The audit trail (docs/security.md "Audit trail"): its rows older than this are pruned by the
    # pruner's batches (a duration, 1 day to 10 years). Enqueues (a trigger, a batch) write a row
    # only with DL_AUDIT_ENQUEUE: they are the producers' hot path, and their journal says who.
    audit_retention: float = Field(default=365 * 86400, ge=86400, le=3650 * 86400)
    audit_enqueue: bool = False
    # Per-queue ages over the ones above: {"load": {"succeeded": "1d", "failed": "90d"}}.
    retention_queues_json: Annotated[dict[str, dict[str, float]], NoDecode] = Field(default_factory=dict)
    # The journal's partitions (migration 0039, retention/partitions.py; leader only): created
    # `ahead` intervals ahead (auto: a day when succeeded jobs are kept 4 days or more, else an
    # hour) and, with `drop`, dropped whole once older than the retention of succeeded jobs, the
    # rows of jobs still kept moved into the DEFAULT partition first.
    journal_partitions_enabled: bool = True
    journal_partitions_period_sec: float = Field(default=600, gt=0, le=24 * 3600)
    journal_partitions_interval: Literal["auto", "day", "hour"] = "auto"
    journal_partitions_ahead: int = Field(default=3, ge=1, le=100)
    journal_partitions_drop: bool = True
    journal_partitions_lock_timeout_sec: float = Field(default=0.5, gt=0, le=60)
    # Archival (docs/patterns.md "Archival"): with an fsspec URL (file:///dir, s3://bucket/prefix,
    # memory://…), every batch the pruner deletes is first exported there as gzip JSON lines with a
    # manifest entry; a failed export deletes nothing. Unset: retention deletes without a copy.
    archive_url: str | None = None
    # The stats rollup (leader only): hourly buckets of the jobs finished more than `lag` ago,
    # kept `keep` (a duration, 1 day to 10 years).
    stats_enabled: bool = True
    stats_period_sec: float = Field(default=60, gt=0, le=3600)
    stats_lag_sec: float = Field(default=60, ge=0, le=1800)
    stats_keep: float = Field(default=90 * 86400, ge=86400, le=3650 * 86400)

    # The storage sampler (leader only, docs/observability.md "Storage"): sizes, dead tuples and the
    # last autovacuum of every table we own, sampled this often and kept this long (a duration).
    storage_sample_enabled: bool = True
    storage_sample_sec: float = Field(default=300, ge=10, le=86400)
    storage_sample_keep: float = Field(default=7 * 86400, ge=3600, le=365 * 86400)

    # --- Recovery and operations (docs/operations.md) ---------------------------------
    # Queue time: a job waiting (runnable, unclaimed) longer than its queue's limit is flagged
    # (queue_overdue_at, journal, dl_queue_time_expiries_total) or, where the queue says so, failed.
    # DL_QUEUE_TIME_LIMIT_SEC applies to every queue (0: no limit); per queue
    # DL_QUEUE_TIME_LIMITS_JSON={"load": {"limit": "15m", "fail": true}}.
    queue_time_limit_sec: float = Field(default=0, ge=0, le=3650 * 86400)
    queue_time_fail: bool = False
    queue_time_limits_json: Annotated[dict[str, dict[str, Any]], NoDecode] = Field(default_factory=dict)
    queue_time_period_sec: float = Field(default=15, gt=0, le=3600)
    # Bulk operations: every node runs their runner; an operation whose runner stopped renewing
    # its lease for operations_lease_sec is taken over by another node. The runner wakes on a
    # NOTIFY and at lease ends; operations_period_sec is its backstop look for a lost notification.
    operations_enabled: bool = True
    operations_period_sec: float = Field(default=60, gt=0, le=3600)
    operations_lease_sec: float = Field(default=30, ge=1, le=3600)
    operations_batch_size: int = Field(default=500, ge=1, le=10_000)
    # Pause between batches of one operation: throttles a bulk change next to a busy queue.
    operations_batch_pause_sec: float = Field(default=0, ge=0, le=60)

    # Flow control (docs/flow-control.md): limits per queue across every node, declared
    # as {"load": {"concurrency": 5, "partition_concurrency": 1, "rate": "10/1s"}}; applied at a
    # node's start unless set at run time. A queue named here and in a Queue(limits=...) takes these.
    queues_json: Annotated[dict[str, QueueSettings], NoDecode] = Field(default_factory=dict)
    # Limits per task of a queue (0027), declared as {"load": {"load.cbr": {"concurrency": 3, "rate":
    # "10/1s"}}}: applied at a node's start unless set at run time, over any `@pipeline(limits=...)`
    # of the same task in that queue.
    task_limits_json: Annotated[dict[str, dict[str, TaskSettings]], NoDecode] = Field(default_factory=dict)

    # Processes: a running process with no timer, no task and no change for this long is idle (the
    # dl_processes_idle gauge, and the consistency check's `idle` finding); 0: never.
    process_idle_sec: float = Field(default=86400, ge=0, le=3650 * 86400)

    # Held jobs (dead letter): queues (comma-separated, "*" for all) whose jobs that use up their
    # attempts are held for an operator instead of failed; and error-text prefixes held at once.
    hold_queues: str = ""
    hold_errors_json: Annotated[list[str], NoDecode] = Field(default_factory=list)

    @field_validator("hold_errors_json", mode="before")
    @classmethod
    def _parse_hold_errors(cls, value: Any) -> Any:
        value = _json_text(value, "[]")
        if not isinstance(value, list) or not all(isinstance(v, str) and v and "\x00" not in v for v in value):
            raise ValueError('must be a JSON list of error-text prefixes like ["ValidationError"]')
        return value

    # --- Node registry and observers (docs/observers.md) -------------------------------
    # Every node heartbeats its dl_nodes row this often (one statement); a node silent for more than
    # DL_NODE_DEAD_AFTER_SEC is marked dead by any other node and its observers move. An observer
    # moves within dead_after + heartbeat (+ a claim) after its node died.
    node_heartbeat_sec: float = Field(default=2, gt=0, le=300)
    node_dead_after_sec: float = Field(default=15, gt=0, le=3600)
    # How many observers this node runs at once (None: derived from the machine, see
    # observers/policy.py machine_capacity; 0: none, the node only registers).
    observer_capacity: int | None = Field(default=None, ge=0, le=100_000)
    # A stopped async observer that has not returned after this long is cancelled.
    observer_stop_grace_sec: float = Field(default=3, gt=0, le=600)
    # A crashed observer restarts after base × 2^(n-1) seconds (n-th crash in a row), at most max;
    # a run longer than healthy_after ends the streak.
    observer_restart_backoff_sec: float = Field(default=1, gt=0, le=3600)
    observer_restart_backoff_max_sec: float = Field(default=60, gt=0, le=24 * 3600)
    observer_healthy_after_sec: float = Field(default=300, gt=0, le=7 * 86400)

    # --- Limits of the HTTP API (docs/operations.md "Limits of the HTTP API") ----------
    # The API runs on its own pool of this many connections, never the engine's: no request can
    # make a claim, a heartbeat or the node's registry wait for a connection.
    api_pool_size: int = Field(default=10, ge=2, le=1000)
    # Every statement of an API request is cancelled by PostgreSQL after this long (a clear 503
    # `query_timeout`); an operator's count (search count=true, an operation's dry run) has its own.
    api_statement_timeout_sec: float = Field(default=30, ge=0.1, le=24 * 3600)
    api_count_timeout_sec: float = Field(default=30, ge=0.1, le=24 * 3600)
    # At most this many expensive queries (search, count, an operation's dry run) run at once on
    # one node; past it a request answers 429 `too_many_queries` at once instead of queueing. Kept
    # below api_pool_size so cheap requests (/status, a job's status) always find a connection.
    api_max_expensive_queries: int = Field(default=4, ge=1, le=1000)
    # A request whose body has not fully arrived after this long is answered 408 and closed.
    api_body_timeout_sec: float = Field(default=30, ge=0.1, le=3600)
    # A connection whose request line and headers have not fully arrived this long after its first
    # byte (or after the connection, or the previous answer) is closed: the server's own
    # keep-alive timeout only covers an idle connection, not one trickling in a request's head.
    api_header_timeout_sec: float = Field(default=10, ge=0.1, le=3600)
    # --- Observability (docs/observability.md) -----------------------------------------
    # A scrape of /metrics that finds a transaction holding back the xmin horizon for longer than
    # this logs a WARNING naming its backend (at most once a minute per node).
    db_xmin_warn_sec: float = Field(default=300, gt=0, le=30 * 86400)

    @field_validator("api_max_expensive_queries")
    @classmethod
    def _expensive_below_pool(cls, value: int, info: ValidationInfo) -> int:
        pool_size = info.data.get("api_pool_size")
        if pool_size is not None and value >= pool_size:
            raise ValueError(f"must be below DL_API_POOL_SIZE ({pool_size}), so cheap requests keep a connection")
        return value

    @field_validator("retention_succeeded", "retention_canceled", "retention_failed", "retention_lost",
                     "retention_process_feed", "stats_keep", "ui_session_ttl", "storage_sample_keep", "audit_retention",
                     mode="before")
    @classmethod
    def _parse_duration(cls, value: Any) -> Any:
        return Settings.duration_seconds(value) if isinstance(value, str) else value

    @field_validator(*_QUEUE_OBJECTS, mode="before")
    @classmethod
    def _parse_queue_object(cls, value: Any, info: ValidationInfo) -> Any:
        example, entry, name_ok = _QUEUE_OBJECTS[info.field_name]
        return _json_object(value, f"must be a JSON object like {example}", "queue", entry, name_ok=name_ok)

    def declared_task_settings(self, pipelines: dict[str, TaskSettings]) -> dict[tuple[str, str], TaskSettings]:
        """The limits this node declares, by (queue, task): its pipelines' `@pipeline(limits=...)` in
        each queue its workers serve, then DL_TASK_LIMITS_JSON over them (settings win over code)."""
        declared = {(w.queue, task): limits for w in self.workers for task, limits in pipelines.items()}
        declared.update({(queue, task): limits for queue, tasks in self.task_limits_json.items()
                         for task, limits in tasks.items()})
        return declared

    def declared_queue_settings(self) -> dict[str, QueueSettings]:
        """The limits this node declares, by queue: its workers' `Queue(limits=...)`, then
        DL_QUEUES_JSON over them (settings win over code for a queue named in both)."""
        declared = {w.queue: w.limits for w in self.workers if w.limits is not None}
        declared.update(self.queues_json)
        return declared

    @staticmethod
    def duration_seconds(value: Any) -> float:
        """Seconds from a number or a duration text: "90s", "30m", "12h", "7d", "2w"."""
        if isinstance(value, bool):
            raise ValueError(f"not a duration: {value!r}")
        if isinstance(value, int | float):
            seconds = float(value)
        elif isinstance(value, str):
            text = value.strip().lower()
            units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
            try:
                seconds = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
            except ValueError:
                raise ValueError(f"not a duration: {value!r} (e.g. 3600, 90m, 12h, 7d)") from None
        else:
            raise ValueError(f"not a duration: {value!r} (e.g. 3600, 90m, 12h, 7d)")
        if seconds != seconds or seconds in (float("inf"), float("-inf")):
            raise ValueError(f"not a duration: {value!r}")
        return seconds


def parse_workers_json(raw: str) -> list[Queue]:
    """Parse WORKERS_JSON, raising ConfigError with a one-line explanation."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError("WORKERS_JSON", f"is not valid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(data, list):
        raise ConfigError("WORKERS_JSON", f"must be a JSON list of objects, got {type(data).__name__}")
    return check_workers([_queue_from(index, item) for index, item in enumerate(data)])


def _queue_from(index: int, item: Any) -> Queue:
    if not isinstance(item, dict):
        raise ConfigError("WORKERS_JSON", f"item {index} must be an object like "
                          '{"queue": "q", "concurrency": 1}')
    try:
        return Queue.model_validate(item)
    except ValidationError as exc:
        raise ConfigError("WORKERS_JSON", f"item {index}: {_first_error(exc)}") from None


def check_workers(workers: list[Queue]) -> list[Queue]:
    seen: set[str] = set()
    for worker in workers:
        if worker.queue in seen:
            raise ConfigError("WORKERS_JSON", f"queue {worker.queue!r} is listed twice")
        seen.add(worker.queue)
    return workers


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(part) for part in err["loc"]) or "value"
    if err["type"] == "extra_forbidden":
        return f"unknown key {where!r} (allowed: queue, concurrency)"
    return f"{where}: {err['msg']}"


def load_settings(**overrides: object) -> Settings:
    """Read and validate settings; any problem becomes a ConfigError naming the variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "?"
        env_name = "WORKERS_JSON" if field in ("workers", "workers_json", "WORKERS_JSON") else f"DL_{field.upper()}"
        raise ConfigError(env_name, err["msg"].removeprefix("Value error, ")) from None
