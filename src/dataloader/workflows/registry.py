"""Workflows by name: the Python code of each, registered with `@workflow(name)`.

A workflow is an `async def f(wf, input)` (or a plain `def`, run in a worker thread with a blocking
`wf`). Registering one also registers the pipeline of its run jobs, task `workflow:<name>`, in
the engine's pipeline registry: a run is an ordinary job of the workflow's queue, served by any
worker of that queue whose process imported the module (DL_PIPELINE_MODULES), as pipelines are;
and that of its step jobs, task `workflow-step:<name>`, which run on whatever queue the step names.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dataloader.model.workflow import check_name, step_task_of, task_of
from dataloader.workers.pipelines.registry import PipelineRegistry
from dataloader.workers.pipelines.registry import registry as pipeline_registry

DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class WorkflowDefinition:
    name: str
    func: Callable[..., Any]
    is_async: bool
    queue: str = DEFAULT_QUEUE
    # Attempts of the run's job. A run's job fails an attempt only when the run could not even be
    # replayed (a bug of ours, a broken module); the code's own errors end the run at once, and a
    # database restart hands the job back without using one.
    max_attempts: int = 10

    @property
    def task(self) -> str:
        return task_of(self.name)


class WorkflowRegistry:
    def __init__(self, pipelines: PipelineRegistry = pipeline_registry) -> None:
        self._workflows: dict[str, WorkflowDefinition] = {}
        self._pipelines = pipelines

    def register(self, name: str, func: Callable[..., Any], *, queue: str = DEFAULT_QUEUE,
                 max_attempts: int = 10, replace: bool = False) -> WorkflowDefinition:
        check_name("workflow name", name)
        if not callable(func):
            raise TypeError(f"workflow {name!r} must be callable")
        if not isinstance(queue, str) or not queue:
            raise ValueError(f"workflow {name!r}: queue must be a non-empty string")
        if not 1 <= max_attempts <= 1000:
            raise ValueError(f"workflow {name!r}: max_attempts must be 1 to 1000")
        existing = self._workflows.get(name)
        if existing is not None and existing.func is not func and not replace:
            raise ValueError(f"workflow {name!r} is already registered by {existing.func.__module__}")
        definition = WorkflowDefinition(name, func, inspect.iscoroutinefunction(func), queue, max_attempts)
        from dataloader.workflows.runner import pipeline_of, step_pipeline_of  # the runner needs the registry

        self._pipelines.register(definition.task, pipeline_of(definition), max_attempts=max_attempts, replace=True)
        # its step jobs: any worker of any queue whose process registered the workflow runs them; their
        # attempts are each job's own (the step's max_attempts), their delays the step's backoff (Retry)
        self._pipelines.register(step_task_of(name), step_pipeline_of(definition), replace=True)
        self._workflows[name] = definition
        return definition

    def get(self, name: str) -> WorkflowDefinition | None:
        return self._workflows.get(name)

    def names(self) -> list[str]:
        return sorted(self._workflows)

    def unregister(self, name: str) -> None:
        self._workflows.pop(name, None)


workflows = WorkflowRegistry()


def workflow(name: str, *, queue: str = DEFAULT_QUEUE, max_attempts: int = 10
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as workflow `name`; its runs are jobs of `queue`."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        workflows.register(name, func, queue=queue, max_attempts=max_attempts)
        return func

    return decorate
