"""`ObserverContext`: what a running observer gets — its name, args, the position it saved last
(`checkpoint`, restored after a move to another node), the stop request, and fenced writes of its
position and state."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from dataloader.exceptions import ObserverFenced
from dataloader.storage.db import is_connection_error

Save = Callable[[str, int, str | None, str | None], Awaitable[bool]]
log = logging.getLogger("dataloader.observers")
SAVE_RETRY_FIRST_SEC = 0.1
SAVE_RETRY_MAX_SEC = 2.0


class ObserverContext:
    def __init__(self, *, name: str, kind: str, args: dict[str, Any], epoch: int, checkpoint: Any,
                 node_id: uuid.UUID, node_name: str, moves: int, save: Save,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.kind = kind
        self.args = args
        self.epoch = epoch  # the fencing token of this run (grows on every claim)
        self.checkpoint = checkpoint  # what the observer saved last, on any node (None at first)
        self.node_id = node_id
        self.node_name = node_name
        self.moves = moves  # how many times it was moved off a node that died or stopped
        self._save = save
        self._loop = loop
        self._stop = asyncio.Event()
        self._stop_flag = threading.Event()  # the same request, readable from a sync observer's thread
        self.stop_reason: str | None = None

    # -- the stop request ---------------------------------------------------------------------------

    @property
    def stop_requested(self) -> bool:
        return self._stop_flag.is_set()

    @property
    def stopping(self) -> asyncio.Event:
        """Set when the observer should return (a stop by name, its node stopping, fencing)."""
        return self._stop

    def request_stop(self, reason: str) -> None:
        if not self._stop_flag.is_set():
            self.stop_reason = reason
            self._stop_flag.set()
            self._stop.set()

    async def sleep(self, seconds: float) -> bool:
        """Sleep, or less when a stop is requested; True when it was."""
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True

    def sleep_blocking(self, seconds: float) -> bool:
        """`sleep` for a sync observer (in its thread)."""
        return self._stop_flag.wait(seconds)

    # -- fenced writes ------------------------------------------------------------------------------

    async def save(self, checkpoint: Any = None, *, status: Any = None) -> None:
        """Store the position to resume from (`checkpoint`, read back as `ctx.checkpoint` after a
        move) and/or a state for humans (`status`, shown by the API). Fenced: if this run no longer
        holds the observer, raises `ObserverFenced` (let it propagate: the observer ends)."""
        cp = None if checkpoint is None else json.dumps(checkpoint, ensure_ascii=False, allow_nan=False)
        st = None if status is None else json.dumps(status, ensure_ascii=False, allow_nan=False)
        if not await self._save_through_outages(cp, st):
            self.request_stop("fenced")
            raise ObserverFenced(f"observer {self.name!r} run {self.epoch} no longer holds it")
        if checkpoint is not None:
            self.checkpoint = checkpoint

    async def _save_through_outages(self, cp: str | None, st: str | None) -> bool:
        """The fenced write, retried while the database is unreachable (a restart is weather, not
        an error: the observer waits in `save` instead of crashing). It ends when the write gets
        through, or as not-held when the run is asked to stop meanwhile (its node could not
        heartbeat for `fence_after` and fenced it, or a stop by name or of the node)."""
        delay = SAVE_RETRY_FIRST_SEC
        while True:
            try:
                return await self._save(self.name, self.epoch, cp, st)
            except Exception as exc:
                if not is_connection_error(exc):
                    raise
                log.warning("observer save: database unavailable, retrying: %s", exc,
                            extra={"observer": self.name})
            if await self.sleep(delay):
                return False
            delay = min(delay * 2, SAVE_RETRY_MAX_SEC)

    async def report(self, status: Any) -> None:
        """Report a state for humans (GET /api/v1/observers/{name} shows it); fenced like `save`."""
        await self.save(status=status)

    def save_blocking(self, checkpoint: Any = None, *, status: Any = None, timeout: float = 30) -> None:
        """`save` for a sync observer (in its thread)."""
        asyncio.run_coroutine_threadsafe(self.save(checkpoint, status=status), self._loop).result(timeout)
