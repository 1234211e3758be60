"""A queue worker's control connection and its lock ledger.

A lock_key's advisory lock is a session lock: the claim that takes it, the heartbeats and the
finish that releases it must use one connection. This module owns that connection and the ledger
of which job holds which lock hash on it. When the connection dies its locks die with it: the
ledger remembers them, and the next connection takes them again (`relock_jobs.sql`), stopping an
attempt that was fenced off meanwhile or whose key someone else took. A connection that still
holds a lock when the worker ends (a forced-stopped sync pipeline runs on in its thread) is
quarantined: never released, so the key stays taken until the process exits.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import datetime

import asyncpg

from dataloader import metrics
from dataloader.storage.owned_connection import OwnedConnection
from dataloader.storage.queue_connection import QueueConnection
from dataloader.workers.attempt import Attempt

log = logging.getLogger("dataloader.worker")


class LockLedger:
    """Which job holds which lock hash on the control connection."""

    def __init__(self) -> None:
        self._held: dict[int, uuid.UUID] = {}
        # Queued jobs held back because one of our own attempts that no longer runs (a sync thread
        # past its run-time limit) still holds their key: (job_id, the available_at they were
        # held back to), woken when that key is released.
        self._parked: dict[int, list[tuple[uuid.UUID, datetime]]] = {}

    def __bool__(self) -> bool:
        return bool(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, lock_hash: object) -> bool:
        return lock_hash in self._held

    def holder(self, lock_hash: int | None) -> uuid.UUID | None:
        return self._held.get(lock_hash) if lock_hash is not None else None

    def take(self, lock_hash: int, job_id: uuid.UUID) -> None:
        self._held[lock_hash] = job_id

    def release(self, lock_hash: int | None) -> list[tuple[uuid.UUID, datetime]]:
        """Forget the lock; returns the jobs parked behind it (to wake now)."""
        self._held.pop(lock_hash, None)  # type: ignore[arg-type]
        return self._parked.pop(lock_hash, []) if lock_hash is not None else []

    def has_parked(self) -> bool:
        """Whether any job waits for one of our keys' release (`park`)."""
        return bool(self._parked)

    def park(self, lock_hash: int, job_id: uuid.UUID, available_at: datetime) -> None:
        """`job_id` was held back until `available_at` because our stray attempt holds the key."""
        self._parked.setdefault(lock_hash, []).append((job_id, available_at))

    def holders(self) -> dict[uuid.UUID, int]:
        """job_id -> lock hash, for every lock held."""
        return {job_id: lock_hash for lock_hash, job_id in self._held.items()}

    def clear(self) -> None:
        self._held.clear()
        self._parked.clear()

    def snapshot(self) -> dict[int, uuid.UUID]:
        return dict(self._held)


class ControlConnection:
    """The one connection of a queue worker that holds its jobs' advisory locks, and its only owner
    (storage/owned_connection.py): the worker's steps use it one statement at a time through the
    OwnedConnection that `get` returns for the step, and never after it was dropped or released.
    A connection whose session ended is never handed out again: `get` notices it (asyncpg's
    termination callback), counts its locks as lost and retakes them on the next connection."""

    def __init__(self, queue: str, pool: asyncpg.Pool, quarantine: list[asyncpg.Connection],
                 running: Mapping[uuid.UUID, Attempt]) -> None:
        self.queue = queue
        self.ledger = LockLedger()
        self._pool = pool
        self._quarantine = quarantine
        self._running = running
        self._owned: OwnedConnection | None = None
        self._locks_lost = False
        # how many times the ledger was rebuilt on a new connection (only the running attempts'
        # locks are retaken: the queue worker puts back the jobs it claimed ahead)
        self.relocks = 0

    async def get(self) -> OwnedConnection:
        """The connection for one step: the held one if its session is alive, else a new one with
        the ledger's locks retaken (a step that fails before it is done must `drop` it)."""
        owned = self._owned
        if owned is not None and (owned.lost or not owned.held):
            # The session ended between steps (or a failed rollback ended it): its locks are gone.
            self.drop()
            owned = None
        if owned is None:
            owned = await OwnedConnection.acquire(self._pool, f"control connection of queue {self.queue!r}")
            self._owned = owned
            if self._locks_lost:
                await self._relock(owned)
        return owned

    async def _relock(self, conn: OwnedConnection) -> None:
        """The previous connection died and its advisory locks with it: take them again. An
        attempt fenced off meanwhile, or whose key someone else took, is stopped. Every statement
        runs before the ledger changes: if one fails, the ledger still lists every lock to retake
        on the next connection."""
        holders = self.ledger.holders()
        attempts = [(a.job.job_id, a.job.attempt, a.job.lock_key) for a in self._running.values()
                    if a.job.job_id in holders]
        results = await QueueConnection(conn).relock(attempts) if attempts else {}
        for job_id, (alive, locked) in results.items():
            if locked and not alive:  # taken although fenced off: give it back at once
                await QueueConnection(conn).unlock(self._running[job_id].job.lock_key)
        self._locks_lost = False
        self.relocks += 1
        self.ledger.clear()
        for job_id, (alive, locked) in results.items():
            attempt = self._running[job_id]
            if alive and locked:
                self.ledger.take(attempt.job.lock_hash, job_id)
            else:
                log.warning("after reconnect the attempt is no longer ours; stopping it",
                            extra=attempt.log_extra(fenced=not alive))
                attempt.request_stop("lease_lost")
        metrics.DB_RECONNECTS.labels("locks").inc()
        log.info("reconnected and retook lock_keys", extra={"queue": self.queue, "held": len(self.ledger)})

    def drop(self) -> None:
        """A step failed (or the session ended): end the connection (its locks go with it, so
        nothing of a rolled-back step survives); the ledger keeps them to be retaken on the next
        connection. The dropped owner refuses every later use."""
        owned, self._owned = self._owned, None
        if owned is None:
            return
        if self.ledger:
            self._locks_lost = True
        owned.terminate()

    async def release(self) -> None:
        """The worker ends: give the connection back, or quarantine it if it still holds a lock."""
        owned, self._owned = self._owned, None
        if owned is None:
            return
        if self.ledger and not owned.lost:
            # A forced-stopped sync pipeline still runs in its thread: keep its lock_key locked
            # until the process exits, so never reuse or release this connection.
            conn = owned.quarantine()
            if conn is not None:
                self._quarantine.append(conn)
            return
        try:
            await owned.release()
        except Exception:
            log.debug("release of the control connection failed", exc_info=True)
