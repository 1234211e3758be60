"""Live pages: server-sent events fed by ONE shared poll per node, however many browsers watch.

Each open page subscribes to a few topics ("overview", "job:<id>", ...). While anybody subscribes,
one task renders every watched topic's fragment once per DL_UI_LIVE_POLL_SEC through the `App` (the
same reads the page made) and sends the fragments that changed to that topic's subscribers. Fifty
browsers on the overview cost the queries of one; a node nobody watches polls nothing (promise 6:
an idle system does near-zero queries)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from dataloader import metrics

log = logging.getLogger("dataloader.ui")

# A topic's fragment, or None when it has none right now (the App is starting or stopping).
Renderer = Callable[[str], Awaitable[str | None]]
# A browser that stops reading its stream must not grow this node's memory.
QUEUE_BOUND = 16


class LiveHub:
    def __init__(self, render: Renderer, period_sec: float) -> None:
        self.render = render
        self.period_sec = period_sec
        self._subscribers: dict[asyncio.Queue[tuple[str, str]], frozenset[str]] = {}
        self._last: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # How many rounds and topic renders ran (tests and docs/console.md: one poll per node).
        self.rounds = 0
        self.renders = 0

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    @contextlib.asynccontextmanager
    async def subscribe(self, topics: frozenset[str]) -> AsyncIterator[asyncio.Queue[tuple[str, str]]]:
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue(QUEUE_BOUND)
        self._subscribers[queue] = topics
        metrics.UI_LIVE_SUBSCRIBERS.inc()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="dataloader-ui-live")
        try:
            yield queue
        finally:
            del self._subscribers[queue]
            metrics.UI_LIVE_SUBSCRIBERS.dec()
            if not self._subscribers:
                self._wake.set()

    async def _run(self) -> None:
        while self._subscribers:
            topics = frozenset().union(*self._subscribers.values())
            self.rounds += 1
            for topic in sorted(topics):
                try:
                    html = await self.render(topic)
                except Exception as exc:  # a database restart is weather: the next round tries again
                    log.warning("console live update failed", extra={"topic": topic, "error": repr(exc)[:300]})
                    continue
                self.renders += 1
                metrics.UI_LIVE_RENDERS.inc()
                if html is None or self._last.get(topic) == html:
                    continue
                # Sent on a topic's first round too: the state may have moved since the page rendered.
                self._last[topic] = html
                for queue, wanted in list(self._subscribers.items()):
                    if topic in wanted:
                        if queue.full():  # a stalled reader gets the newest state, not a backlog
                            with contextlib.suppress(asyncio.QueueEmpty):
                                queue.get_nowait()
                        queue.put_nowait((topic, html))
            for topic in set(self._last) - topics:
                del self._last[topic]
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.period_sec)
        self._last.clear()


def sse_event(name: str, data: str) -> str:
    """One server-sent event; every line of `data` on its own `data:` line, as the format wants."""
    lines = "".join(f"data: {line}\n" for line in data.splitlines() or [""])
    return f"event: {name}\n{lines}\n"
