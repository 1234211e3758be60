"""dataloader: durable background jobs on PostgreSQL.

Everything a user needs is importable from here; anything else may change between versions.
"""

from dataloader.app import App
from dataloader.chain import Stage, Then
from dataloader.config import Queue, Settings
from dataloader.exceptions import (
    ArgsTooLarge,
    AttemptFenced,
    Cancel,
    ChainNotFound,
    ConfigError,
    DatabaseUnavailable,
    DataloaderError,
    FatalError,
    IdempotencyConflict,
    InvalidCursor,
    InvalidJobRequest,
    InvalidObserverRequest,
    JobAlreadyFinished,
    JobNotFound,
    JobNotRetryable,
    JobOutcome,
    JobStopped,
    ObserverExists,
    ObserverFenced,
    ObserverNotFound,
    RestartConflict,
    Retry,
    SchemaMismatch,
    SchemaNotReady,
    Snooze,
    UnknownTask,
)
from dataloader.job import Chain, Job, JobEvent, JobPage, JobStatus
from dataloader.observers import Node, Observer, ObserverContext, ObserverSpec, ObserverState, observer
from dataloader.schedules import MissedPolicy, Schedule, ScheduleRun, ScheduleSpec, schedule
from dataloader.services.jobs import JobRequest
from dataloader.sync import SyncApp
from dataloader.workers.pipelines.context import JobContext
from dataloader.workers.pipelines.registry import PipelineRegistry, pipeline

__all__ = [
    "App",
    "ArgsTooLarge",
    "AttemptFenced",
    "Cancel",
    "Chain",
    "ChainNotFound",
    "ConfigError",
    "DatabaseUnavailable",
    "DataloaderError",
    "FatalError",
    "IdempotencyConflict",
    "InvalidCursor",
    "InvalidJobRequest",
    "InvalidObserverRequest",
    "Job",
    "JobAlreadyFinished",
    "JobContext",
    "JobEvent",
    "JobNotFound",
    "JobNotRetryable",
    "JobOutcome",
    "JobPage",
    "JobRequest",
    "JobStatus",
    "JobStopped",
    "MissedPolicy",
    "Node",
    "Observer",
    "ObserverContext",
    "ObserverExists",
    "ObserverFenced",
    "ObserverNotFound",
    "ObserverSpec",
    "ObserverState",
    "PipelineRegistry",
    "Queue",
    "RestartConflict",
    "Retry",
    "Schedule",
    "ScheduleRun",
    "ScheduleSpec",
    "SchemaMismatch",
    "SchemaNotReady",
    "Settings",
    "Snooze",
    "Stage",
    "SyncApp",
    "Then",
    "UnknownTask",
    "observer",
    "pipeline",
    "schedule",
]
__version__ = "0.1.0"
