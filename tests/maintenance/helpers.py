"""Services made to order for the supervisor and periodic-base tests: each records what happened to
it, and waits only on the injected clock or on events the test controls."""

from __future__ import annotations

import asyncio

from dataloader.maintenance import LeaderElector, Scope, Service, ServiceSettings
from dataloader.model.clock import Clock


class Recorder:
    """A shared log of starts and stops, to check the order across services."""

    def __init__(self) -> None:
        self.events: list[str] = []


class Steady(Service):
    """Runs until asked to stop."""

    def __init__(self, name: str, recorder: Recorder, *, scope: Scope = Scope.EVERY_NODE,
                 clock: Clock | None = None) -> None:
        super().__init__(ServiceSettings(), **({"clock": clock} if clock else {}))
        self.name = name  # type: ignore[misc]  # per-instance names keep the tests short
        self.scope = scope  # type: ignore[misc]
        self.recorder = recorder
        self.runs = 0

    async def run(self) -> None:
        self.runs += 1
        self.recorder.events.append(f"start {self.name}")
        try:
            await self.stopping.wait()
        finally:
            self.recorder.events.append(f"stop {self.name}")


class Crashing(Service):
    """Raises at once on every run, or after `healthy_for` seconds of the clock."""

    name = "crashing"

    def __init__(self, clock: Clock, *, healthy_for: float = 0.0) -> None:
        super().__init__(ServiceSettings(), clock=clock)
        self.healthy_for = healthy_for
        self.runs = 0
        self.started = asyncio.Event()

    async def run(self) -> None:
        self.runs += 1
        self.started.set()
        if self.healthy_for and await self.clock.wait(self.stopping, self.healthy_for):
            return
        raise ValueError(f"boom {self.runs}")


class Returning(Service):
    """Ends its run on its own: a bug the supervisor must treat like a crash."""

    name = "returning"

    async def run(self) -> None:
        return None


class ManualElector(LeaderElector):
    """An elector whose leadership the test sets; it never touches a database."""

    def __init__(self) -> None:
        super().__init__("postgresql://unused/unused", node_name="test-node")

    async def run(self) -> None:
        await self.stopping.wait()

    async def lead(self, leading: bool) -> None:
        self.is_leader = leading
        assert self.on_change is not None
        await self.on_change(leading)
