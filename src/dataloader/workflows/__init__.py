"""Durable workflows (docs/workflows.md): plain Python functions whose steps are recorded, whose
sleeps and waits hold no worker, and whose children are joined exactly once — a capability on the
job engine, not a second engine: a run is a job, a step a recorded result beside it, a sleep a
delayed hand-back of that job, a join a counter changed in the same transaction as each child's end."""

from dataloader.model.workflow import Recorded, WorkflowRun
from dataloader.workflows.context import (
    Child,
    ChildFailed,
    HistoryMismatch,
    StepCall,
    StepFailed,
    SyncWorkflow,
    WaitToken,
    Workflow,
)
from dataloader.workflows.registry import WorkflowDefinition, WorkflowRegistry, workflow, workflows

__all__ = [
    "Child",
    "ChildFailed",
    "HistoryMismatch",
    "Recorded",
    "StepCall",
    "StepFailed",
    "SyncWorkflow",
    "WaitToken",
    "Workflow",
    "WorkflowDefinition",
    "WorkflowRegistry",
    "WorkflowRun",
    "workflow",
    "workflows",
]
