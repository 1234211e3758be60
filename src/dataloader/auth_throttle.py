"""Wrong tokens are slowed: per client address, past `max_failures` wrong tokens within `window_sec`
(DL_AUTH_MAX_FAILURES, DL_AUTH_FAILURE_WINDOW_SEC) every further try from that address is answered
429 with Retry-After, without looking at the token, until its oldest failure leaves the window.

Why: DL_API_TOKEN is the one secret of both the console's login page and the API's bearer check;
without a bound, a client may guess at it as fast as the node answers. One throttle serves both
faces, so a guesser gains nothing by switching between them.

Its state is the node's memory, on purpose: a check costs no query, and a guesser spreading its
tries over the replicas of a service gets `max_failures` per node and window, still a few per
second at most. The address is the connection's peer (behind a proxy: the proxy's, so every
client behind it shares one budget; uvicorn's --proxy-headers with --forwarded-allow-ips makes it
the client's). A right token clears its address's failures. The table of addresses is bounded:
past MAX_ADDRESSES the address with the oldest last failure is forgotten first.

Time is a `Clock` (model/clock.py), so a test moves it instead of sleeping.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque

from dataloader.model.clock import SYSTEM_CLOCK, Clock

MAX_ADDRESSES = 10_000


class AuthThrottle:
    def __init__(self, max_failures: int, window_sec: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.max_failures = max_failures
        self.window_sec = window_sec
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, address: str) -> deque[float] | None:
        failures = self._failures.get(address)
        if failures is None:
            return None
        horizon = self._clock.monotonic() - self.window_sec
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            del self._failures[address]
            return None
        return failures

    def retry_after(self, address: str | None) -> int | None:
        """Whole seconds `address` must wait before its next try (at least 1), or None: it may try."""
        if not self.max_failures or address is None:
            return None
        failures = self._recent(address)
        if failures is None or len(failures) < self.max_failures:
            return None
        return max(1, math.ceil(failures[0] + self.window_sec - self._clock.monotonic()))

    def failed(self, address: str | None) -> None:
        """`address` sent a wrong token."""
        if not self.max_failures or address is None:
            return
        failures = self._recent(address)
        if failures is None:
            failures = self._failures[address] = deque(maxlen=self.max_failures)
        failures.append(self._clock.monotonic())
        self._failures.move_to_end(address)
        while len(self._failures) > MAX_ADDRESSES:
            self._failures.popitem(last=False)

    def succeeded(self, address: str | None) -> None:
        """`address` sent the right token: its failures are forgotten."""
        if address is not None:
            self._failures.pop(address, None)
