"""Pipelines by task name: what runs a job.

A pipeline takes one argument, the `JobContext`, and is one of:
- an async generator: `yield` between chunks; the worker heartbeats and checks for cancel there;
- an async function: one chunk; a cancel interrupts it at its next await;
- a plain function or generator: run in a worker thread (a generator chunk by chunk).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Literal

from dataloader.exceptions import ConfigError
from dataloader.logger.context_vars import share_log_context_with
from dataloader.model.flow import TaskSettings, task_settings_from_declaration
from dataloader.workers.pipelines.builtin import BUILTIN_PIPELINES

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "dataloader.pipelines"
PipelineKind = Literal["async_gen", "async", "sync_gen", "sync"]


def default_backoff(attempt: int) -> float:
    """003 §6: the n-th failed attempt waits 30·n seconds before the next one."""
    return 30.0 * attempt


@dataclass(frozen=True)
class Pipeline:
    name: str
    func: Callable[..., Any]
    kind: PipelineKind
    max_attempts: int | None = None
    backoff: Callable[[int], float] = default_backoff
    # Run-time limit of an attempt in seconds (None: none); a job's own timeout_sec overrides it.
    timeout: float | None = None
    # The task's limits across every node (0027; None: none), declared in each queue the node
    # serves at its start unless set there at run time (docs/flow-control.md "Limits per task").
    limits: TaskSettings | None = None


def _kind_of(func: Callable[..., Any]) -> PipelineKind:
    if inspect.isasyncgenfunction(func):
        return "async_gen"
    if inspect.iscoroutinefunction(func):
        return "async"
    if inspect.isgeneratorfunction(func):
        return "sync_gen"
    return "sync"


class PipelineRegistry:
    def __init__(self) -> None:
        self._pipelines: dict[str, Pipeline] = {}

    def register(
        self,
        name: str,
        func: Callable[..., Any],
        *,
        max_attempts: int | None = None,
        backoff: Callable[[int], float] | None = None,
        replace: bool = False,
        timeout: float | None = None,
        limits: Mapping[str, Any] | TaskSettings | None = None,
    ) -> Pipeline:
        if not name or not isinstance(name, str):
            raise ValueError("pipeline name must be a non-empty string")
        if not callable(func):
            raise TypeError(f"pipeline {name!r} must be callable")
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"pipeline {name!r}: max_attempts must be >= 1")
        if timeout is not None and not (0 < timeout <= 7 * 24 * 3600):
            raise ValueError(f"pipeline {name!r}: timeout must be > 0 and at most a week (seconds)")
        if limits is not None and not isinstance(limits, TaskSettings):
            try:
                limits = task_settings_from_declaration(limits)
            except ValueError as exc:
                raise ValueError(f"pipeline {name!r}: limits: {exc}") from None
        existing = self._pipelines.get(name)
        if existing is not None and existing.func is not func and not replace:
            raise ValueError(f"pipeline {name!r} is already registered by {existing.func.__module__}")
        entry = Pipeline(name, func, _kind_of(func), max_attempts, backoff or default_backoff, timeout, limits)
        self._pipelines[name] = entry
        return entry

    def get(self, name: str) -> Pipeline | None:
        return self._pipelines.get(name)

    def names(self) -> list[str]:
        return sorted(self._pipelines)

    def declared_task_limits(self) -> dict[str, TaskSettings]:
        """The limits the registered pipelines declare, by task (`@pipeline(limits=...)`)."""
        return {name: p.limits for name, p in self._pipelines.items() if p.limits is not None}

    def __contains__(self, name: object) -> bool:
        return name in self._pipelines


registry = PipelineRegistry()


def pipeline(
    name: str, *, max_attempts: int | None = None, backoff: Callable[[int], float] | None = None,
    timeout: float | None = None, limits: Mapping[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the pipeline of task `name`.

    `max_attempts` overrides the job's own limit; `backoff(attempt) -> seconds` the retry delay;
    `timeout` (seconds) limits each attempt's run time unless the job has a `timeout_sec` of its own.
    `limits` caps the task across every node, in each queue it runs in: `{"concurrency": 3}` (jobs
    of the task running at once), `{"rate": "10/1s"}` (starts per period) — the keys and ranges of
    `Queue(limits=...)`; a change at run time (`configure_task`) wins (docs/flow-control.md).
    """
    checked = task_settings_from_declaration(limits) if limits is not None else None  # fails at import

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        registry.register(name, func, max_attempts=max_attempts, backoff=backoff, timeout=timeout, limits=checked)
        return func

    return decorate


def _one_line(exc: BaseException) -> str:
    """`Type: message` on one line: a configuration error is reported as a single line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_pipeline_modules(module_names: list[str]) -> None:
    """Import user modules (DL_PIPELINE_MODULES) and the `dataloader.pipelines` entry points so their
    @pipeline decorators run. A module that fails to import is a ConfigError naming it (the CLI
    prints it as one line and exits 2). Modules are looked up on sys.path as it is: the CLI puts
    the working directory there first, a library user decides for themselves."""
    for name, func in BUILTIN_PIPELINES.items():
        registry.register(name, func)
    for module_name in module_names:
        try:
            importlib.import_module(module_name)
        except Exception as exc:
            raise ConfigError("DL_PIPELINE_MODULES",
                              f"cannot import {module_name!r}: {_one_line(exc)}") from exc
        share_log_context_with(module_name)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:
            raise ConfigError(f"entry point {ep.name!r} ({ENTRY_POINT_GROUP})",
                              f"cannot load {ep.value!r}: {_one_line(exc)}") from exc
        share_log_context_with(ep.module)
