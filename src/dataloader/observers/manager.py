"""Observers and nodes: create, read, list, stop (by name), and the node registry — the rules behind
`app.observers`, the HTTP API (`/api/v1/observers`, `/api/v1/nodes`) and the CLI (`dataloader
observers`, `dataloader nodes`).

Input is an `ObserverSpec`, validated before anything is written (a bad name, NUL characters,
args PostgreSQL cannot store, a kind this process has no code for). A stop is confirmed when the
observer is `deleted`: `stop(wait=...)` waits for that.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import ValidationError

from dataloader.exceptions import (
    InvalidObserver,
    InvalidObserverRequest,
    ObserverExists,
    ObserverNotFound,
    ValidationFailed,
)
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.model.observer import Node, Observer, ObserverSpec, ObserverState
from dataloader.model.storable import json_text_problem
from dataloader.observers.registry import ObserverRegistry
from dataloader.storage.audit_repository import audited
from dataloader.storage.observer_repository import NodeRepository, ObserverRepository

MAX_LIST_LIMIT = 10_000
STOP_POLL_SEC = 0.1


class ObserverManager:
    def __init__(self, repo: ObserverRepository, nodes: NodeRepository, kinds: ObserverRegistry, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.repo = repo
        self.node_repo = nodes
        self.kinds = kinds
        self.clock = clock

    @staticmethod
    def spec(**fields: Any) -> ObserverSpec:
        """An ObserverSpec from keyword fields, or InvalidObserverRequest."""
        try:
            spec = ObserverSpec(**fields)
        except ValidationError as exc:  # the model's check: HTTP's validation_error for the same body
            failed = ValidationFailed.from_errors(exc.errors())
            raise InvalidObserver(str(failed), failed.fields) from None
        try:
            text = spec.args_json()
        except ValueError as exc:
            raise InvalidObserverRequest(f"args: {exc}") from None
        problem = json_text_problem(spec.args, text)
        if problem:
            raise InvalidObserverRequest(f"args: {problem}")
        return spec

    async def create(self, spec: ObserverSpec) -> Observer:
        kind = self.kinds.get(spec.kind)
        if kind is None:
            known = ", ".join(self.kinds.names()) or "none"
            raise InvalidObserverRequest(f"unknown observer kind {spec.kind!r} (this process knows: {known})")
        max_restarts = spec.max_restarts if spec.max_restarts is not None else kind.max_restarts
        async with audited(self.repo, "observer.create", "observer", spec.name,
                           {"kind": spec.kind, "max_restarts": max_restarts}) as change:
            created = await change.repo.insert(spec, max_restarts)
            if created is None:
                raise ObserverExists(f"an observer named {spec.name!r} exists (stop it first)")
        return created

    async def get(self, name: str) -> Observer:
        found = await self.repo.get(name)
        if found is None:
            raise ObserverNotFound(f"no observer {name!r}")
        return found

    async def list(self, *, state: ObserverState | str | None = None, kind: str | None = None,
                   node: str | None = None, after: str | None = None, limit: int = 1000) -> list[Observer]:
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidObserverRequest(f"limit must be between 1 and {MAX_LIST_LIMIT}")
        if state is not None:
            try:
                state = ObserverState(state).value
            except ValueError:
                raise InvalidObserverRequest(
                    f"unknown state {state!r} (one of {', '.join(s.value for s in ObserverState)})") from None
        return await self.repo.list(state=state, kind=kind, node=node, after=after, limit=limit)

    async def stop(self, name: str, *, wait: float = 0) -> Observer:
        """Ask it to stop (a waiting one is `deleted` at once); with `wait` seconds, return once it is
        `deleted` or the time is up (then it is still `on_deleting`: its node stops it, or the
        dead bound moves it — as `deleted`)."""
        if wait < 0:
            raise InvalidObserverRequest("wait must not be negative")
        async with audited(self.repo, "observer.stop", "observer", name) as change:
            stopped = await change.repo.stop(name)
            if stopped is None:
                raise ObserverNotFound(f"no observer {name!r}")
        deadline = self.clock.monotonic() + wait
        while stopped.state is not ObserverState.DELETED and self.clock.monotonic() < deadline:
            await asyncio.sleep(STOP_POLL_SEC)
            stopped = await self.get(name)
        return stopped

    async def nodes(self, *, include_ended: bool = False, limit: int = 1000) -> list[Node]:
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidObserverRequest(f"limit must be between 1 and {MAX_LIST_LIMIT}")
        return await self.node_repo.list(include_ended=include_ended, limit=limit)
