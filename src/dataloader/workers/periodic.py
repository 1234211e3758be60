"""Base of every background duty that runs on a period (the reaper, and later ones)."""

from __future__ import annotations

import asyncio
import logging
import random

from dataloader.storage.db import is_connection_error

log = logging.getLogger(__name__)


class PeriodicDuty:
    """Runs `tick()` every `period` seconds (with ±10 % jitter so replicas spread out) until
    stopped. A failing tick is logged and retried next period; it never kills the loop."""

    name = "periodic"

    def __init__(self, period: float) -> None:
        self.period = period
        self._stopping = asyncio.Event()

    async def tick(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if is_connection_error(exc):
                    log.warning("%s: database unavailable, will retry: %s", self.name, exc)
                else:
                    log.exception("%s: tick failed", self.name)
            delay = self.period * random.uniform(0.9, 1.1)
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=delay)
            except TimeoutError:
                pass
