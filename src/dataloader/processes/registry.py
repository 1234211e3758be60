"""Processors by namespace: the Python code that advances the processes of a namespace.

    @processor("payments", retry=RetryPolicy(max_attempts=5))
    async def payments(task: ProcessTask, process: Process, ctx: ProcessContext) -> Intent:
        ...

A processor is an async function, a plain function (run in a worker thread), or a class whose
instances have a `process(task, process, ctx)` method (the class is instantiated once). Each
namespace's tasks are jobs of the queue `process:<ns>`, which `App.running()` serves for every
registered namespace (`concurrency` at a time on each node).
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from dataloader.model.process import NS_PATTERN, RetryPolicy

OnLost = Literal["rerun", "error"]
_NS = re.compile(NS_PATTERN)
QUEUE_PREFIX = "process:"


def queue_of(ns: str) -> str:
    """The queue whose workers run namespace `ns`'s tasks."""
    return QUEUE_PREFIX + ns


@dataclass(frozen=True)
class Processor:
    ns: str
    func: Callable[..., Any]
    is_async: bool
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # What a task whose node died becomes: "rerun" (the lease expires and the task runs again on a
    # live node, fenced) or "error" (progressor's "zombie detected": the process goes to error).
    on_lost: OnLost = "rerun"
    concurrency: int = 4
    # Lease of a step (seconds): how soon a task of a dead node runs again (or is detected).
    lease_ttl_sec: int | None = None
    target: Any = None  # what was registered (the function, or the class)

    @property
    def queue(self) -> str:
        return queue_of(self.ns)


class ProcessorRegistry:
    def __init__(self) -> None:
        self._processors: dict[str, Processor] = {}

    def register(self, ns: str, target: Any, *, retry: RetryPolicy | None = None, on_lost: OnLost = "rerun",
                 concurrency: int = 4, lease_ttl_sec: int | None = None, replace: bool = False) -> Processor:
        if not isinstance(ns, str) or not _NS.fullmatch(ns):
            raise ValueError(f"namespace {ns!r} must be 1-100 letters, digits, '_', '.' or '-'")
        if on_lost not in ("rerun", "error"):
            raise ValueError("on_lost must be 'rerun' or 'error'")
        if not 1 <= concurrency <= 1000:
            raise ValueError("concurrency must be 1 to 1000")
        if lease_ttl_sec is not None and not 1 <= lease_ttl_sec <= 7 * 86400:
            raise ValueError("lease_ttl_sec must be 1 s to a week")
        func = target
        if inspect.isclass(target):
            func = target().process
        if not callable(func):
            raise TypeError(f"processor of {ns!r} must be callable or a class with a process() method")
        existing = self._processors.get(ns)
        if existing is not None and not replace and existing.target is not target:
            raise ValueError(f"namespace {ns!r} already has a processor ({existing.func!r})")
        entry = Processor(ns, func, inspect.iscoroutinefunction(func), retry or RetryPolicy(), on_lost,
                          concurrency, lease_ttl_sec, target)
        self._processors[ns] = entry
        return entry

    def get(self, ns: str) -> Processor | None:
        return self._processors.get(ns)

    def names(self) -> list[str]:
        return sorted(self._processors)

    def unregister(self, ns: str) -> None:
        self._processors.pop(ns, None)

    def __contains__(self, ns: object) -> bool:
        return ns in self._processors


processors = ProcessorRegistry()
log = logging.getLogger("dataloader.processes")


def processor(ns: str, *, retry: RetryPolicy | None = None, on_lost: OnLost = "rerun", concurrency: int = 4,
              lease_ttl_sec: int | None = None, replace: bool = False) -> Callable[[Any], Any]:
    """Register the decorated function (or class) as the processor of namespace `ns`."""

    def decorate(target: Any) -> Any:
        processors.register(ns, target, retry=retry, on_lost=on_lost, concurrency=concurrency,
                            lease_ttl_sec=lease_ttl_sec, replace=replace)
        return target

    return decorate
