"""Observer definitions by kind: what runs an observer, declared in code like a pipeline.

    @observer("feed.follow")
    async def follow(ctx: ObserverContext) -> None:
        while not ctx.stop_requested:
            ...
            await ctx.sleep(5)

An async function runs as a task on the node's loop; a plain function runs in a thread of its own
(docs/observers.md says what a thread cannot be stopped from). Returning without a stop request
counts as a crash: an observer runs until it is stopped.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ObserverKind:
    name: str
    func: Callable[..., Any]
    is_async: bool
    max_restarts: int | None = None


class ObserverRegistry:
    def __init__(self) -> None:
        self._kinds: dict[str, ObserverKind] = {}

    def register(self, name: str, func: Callable[..., Any], *, max_restarts: int | None = None,
                 replace: bool = False) -> ObserverKind:
        if not name or not isinstance(name, str):
            raise ValueError("observer kind must be a non-empty string")
        if not callable(func):
            raise TypeError(f"observer {name!r} must be callable")
        if inspect.isasyncgenfunction(func) or inspect.isgeneratorfunction(func):
            raise TypeError(f"observer {name!r} must be a function (async or not), not a generator")
        if max_restarts is not None and max_restarts < 0:
            raise ValueError(f"observer {name!r}: max_restarts must be >= 0")
        existing = self._kinds.get(name)
        if existing is not None and existing.func is not func and not replace:
            raise ValueError(f"observer kind {name!r} is already registered by {existing.func.__module__}")
        kind = ObserverKind(name, func, inspect.iscoroutinefunction(func), max_restarts)
        self._kinds[name] = kind
        return kind

    def get(self, name: str) -> ObserverKind | None:
        return self._kinds.get(name)

    def names(self) -> list[str]:
        return sorted(self._kinds)

    def __contains__(self, name: object) -> bool:
        return name in self._kinds


observers = ObserverRegistry()


def observer(kind: str, *, max_restarts: int | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the code of observers of `kind`. `max_restarts`: crashes in
    a row before an observer is left `failed` (default: restart forever, with capped backoff)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        observers.register(kind, func, max_restarts=max_restarts)
        return func

    return decorate
