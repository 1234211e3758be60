"""Processes: long-lived, event-sourced state machines advanced one task at a time by a processor
(docs/processes.md). Built on the job engine: each task is a job of queue `process:<ns>`
with lock_key `process:<ns>:<id>`."""

from dataloader.model.process import (
    Event,
    HistoryRange,
    Intent,
    NewEvent,
    Process,
    ProcessStatus,
    ProcessTask,
    RetryPolicy,
    SetTimer,
    TaskType,
    Timer,
    TraceEntry,
    UnsetTimer,
)
from dataloader.processes.registry import Processor, ProcessorRegistry, processor, processors, queue_of

__all__ = [
    "Event",
    "HistoryRange",
    "Intent",
    "NewEvent",
    "Process",
    "ProcessStatus",
    "ProcessTask",
    "Processor",
    "ProcessorRegistry",
    "RetryPolicy",
    "SetTimer",
    "TaskType",
    "Timer",
    "TraceEntry",
    "UnsetTimer",
    "processor",
    "processors",
    "queue_of",
]
