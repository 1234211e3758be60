"""Process requests that used to hurt the node (issue 26): an id outside Latin-1 was created and
then answered 500 (its Location header could not be encoded), and a follower closed while it
waited (an SSE client that hung up) left its waiter tasks pending ("Task was destroyed but it is
pending" at ERROR when they were collected)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tests.conftest import wait_until


async def test_a_process_id_outside_latin1_is_created_with_a_percent_encoded_location(client, ns, pdb):
    base = f"/api/v1/processes/{ns}"
    created = await client.post(base, json={"id": "zh-Ж", "args": {}})
    assert created.status_code == 201, created.text
    assert created.headers["location"] == f"{base}/zh-%D0%96"
    got = await client.get(created.headers["location"])
    assert got.status_code == 200 and got.json()["id"] == "zh-Ж"


def pending_event_waits() -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if not t.done()
            and getattr(t.get_coro(), "__qualname__", "") == "Event.wait"]


async def test_a_follower_closed_while_it_waits_leaves_no_task_behind(app, ns):
    before = set(pending_event_waits())
    feed = app.processes.follow(ns, poll_sec=60)
    waiting = asyncio.ensure_future(anext(feed))  # an empty feed: it waits for a notification
    await wait_until(lambda: set(pending_event_waits()) - before, timeout=10, message="the follower waiting")
    waiting.cancel()  # what the SSE response does when its client hangs up
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await waiting
    await feed.aclose()
    await asyncio.sleep(0)
    assert set(pending_event_waits()) - before == set()


@pytest.mark.parametrize("timeout", [5e-324, 0.01])
async def test_a_task_wait_shorter_than_100ms_is_refused(client, ns, pdb, timeout):
    answer = await client.post(f"/api/v1/processes/{ns}", json={"id": "p", "args": {}, "timeout_sec": timeout})
    assert answer.status_code == 422, answer.text
    assert (await client.get(f"/api/v1/processes/{ns}/p")).status_code == 404


@pytest.mark.parametrize("flag", [0, "false"])
async def test_restart_many_dry_run_must_be_true_or_false(client, ns, pdb, flag):
    operations = await pdb.fetchval("SELECT count(*) FROM dl_operations")
    answer = await client.post(f"/api/v1/processes/{ns}/restart", json={"from": "error", "dry_run": flag})
    assert answer.status_code == 422, answer.text
    assert await pdb.fetchval("SELECT count(*) FROM dl_operations") == operations
