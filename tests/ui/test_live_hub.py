"""The live hub: one shared poll per node, however many browsers subscribe; nothing polled while
nobody watches; a changed fragment reaches every subscriber of its topic and nobody else."""

from __future__ import annotations

import asyncio
import contextlib

from dataloader import metrics
from dataloader.ui.live import LiveHub, sse_event
from tests.conftest import wait_until


async def test_fifty_subscribers_cost_one_render_per_topic_and_round():
    calls: list[str] = []
    state = {"overview": "a", "job:1": "x"}

    async def render(topic: str) -> str:
        calls.append(topic)
        return state[topic]

    hub = LiveHub(render, period_sec=0.05)
    subscribed_before = metrics.UI_LIVE_SUBSCRIBERS._value.get()
    async with contextlib.AsyncExitStack() as stack:
        queues = [await stack.enter_async_context(hub.subscribe(frozenset({"overview"}))) for _ in range(50)]
        job_watcher = await stack.enter_async_context(hub.subscribe(frozenset({"job:1"})))
        await wait_until(lambda: all(q.qsize() == 1 for q in queues), timeout=5, message="the first state")
        rounds_before = hub.rounds
        state["overview"] = "b"
        await wait_until(lambda: all(q.qsize() == 2 for q in queues), timeout=5, message="the change")
        await wait_until(lambda: hub.rounds >= rounds_before + 3, timeout=5)
        # every round renders each watched topic once, not once per subscriber
        assert len(calls) <= 2 * (hub.rounds + 1)
        assert [queues[0].get_nowait(), queues[0].get_nowait()] == [("overview", "a"), ("overview", "b")]
        assert job_watcher.get_nowait() == ("job:1", "x") and job_watcher.empty()
        assert hub.subscribers == 51
        assert metrics.UI_LIVE_SUBSCRIBERS._value.get() - subscribed_before == 51
    assert hub.subscribers == 0
    assert metrics.UI_LIVE_SUBSCRIBERS._value.get() == subscribed_before
    await wait_until(lambda: hub._task is not None and hub._task.done(), timeout=5, message="the poll to stop")
    stopped_at = len(calls)
    await asyncio.sleep(0.2)  # nobody watches: nothing may be polled (the check is that nothing happens)
    assert len(calls) == stopped_at


async def test_a_failing_render_is_retried_and_a_stalled_reader_keeps_only_the_newest():
    tick = {"n": 0}

    async def render(topic: str) -> str:
        tick["n"] += 1
        if tick["n"] == 2:
            raise ConnectionError("database restarting")
        return f"v{tick['n']}"

    hub = LiveHub(render, period_sec=0.01)
    async with hub.subscribe(frozenset({"overview"})) as queue:
        await wait_until(lambda: tick["n"] > 40, timeout=5, message="many rounds")
        assert queue.qsize() <= 16
        items = [queue.get_nowait() for _ in range(queue.qsize())]
        assert items[-1][1] != "v1" and all(name == "overview" for name, _ in items)


def test_an_event_puts_every_line_on_its_own_data_line():
    assert sse_event("overview", "<p>\n</p>") == "event: overview\ndata: <p>\ndata: </p>\n\n"
