"""When a queue worker's next heartbeat is due: a pure schedule on a `Clock`, so the rule (every
DL_HEARTBEAT_SEC, but at least three times per shortest lease; nothing while no attempt runs) can
be checked without a database or real time."""

from __future__ import annotations

from collections.abc import Iterable

from dataloader.model.clock import Clock

# With no attempt to take a lease from, the lease bound does not shorten the period.
NO_LEASE_SEC = 3600


def heartbeat_period(heartbeat_sec: float, lease_ttls: Iterable[int]) -> float:
    """Seconds between heartbeats: DL_HEARTBEAT_SEC, or a third of the shortest lease if less."""
    return min(heartbeat_sec, min(lease_ttls, default=NO_LEASE_SEC) / 3)


class HeartbeatSchedule:
    """The due time of the next heartbeat (None while nothing runs)."""

    def __init__(self, heartbeat_sec: float, clock: Clock) -> None:
        self._heartbeat_sec = heartbeat_sec
        self._clock = clock
        self.next_at: float | None = None

    def started(self, lease_ttls: Iterable[int]) -> None:
        """An attempt started: if none was running, the first heartbeat is one period away."""
        if self.next_at is None:
            self.next_at = self._clock.monotonic() + heartbeat_period(self._heartbeat_sec, lease_ttls)

    def beaten(self, lease_ttls: Iterable[int]) -> None:
        """A heartbeat was written: the next one is one period from now."""
        self.next_at = self._clock.monotonic() + heartbeat_period(self._heartbeat_sec, lease_ttls)

    def idle(self) -> None:
        """No attempt runs any more: no heartbeat is due."""
        self.next_at = None

    def due(self) -> bool:
        return self.next_at is not None and self._clock.monotonic() >= self.next_at

    def until_due(self) -> float | None:
        """Seconds until the next heartbeat (0 if overdue), None if none is scheduled."""
        if self.next_at is None:
            return None
        return max(0.0, self.next_at - self._clock.monotonic())
